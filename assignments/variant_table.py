"""The registered variants of the reference's task files (`variants.Variant`; instructor side, not shipped).

Each is a few exact replacements in the reference's file. WRONG variants are plausible mistakes
a student makes; EQUIVALENT variants are correct code that differs from the reference only
where the handout leaves a choice (the order and kind of random draws, how a condition or a
loop is written).
"""

from __future__ import annotations

from variants import EQUIVALENT, WRONG, Variant

# --- task 2.1: ladref/accept.py ----------------------------------------------------------------
ONE_DRAW = "    u = torch.rand((), dtype=torch.float64, generator=generator)\n    if u * q[d] < p[d]:\n"
ROUND_DRAW = "        u = torch.rand((), dtype=torch.float64, generator=generator)\n        if u * q[d] < r[d]:\n"
REJECT_ONE = "    return int(torch.multinomial(residual(p, q), 1, generator=generator)), False\n"
REJECT_ALL = "    return int(torch.multinomial(r, 1, generator=generator)), None\n"
CHECKED = "    r, q, tokens = check_inputs(p, q, drafts, generator)\n"

TASK2_1 = (
    Variant("task2_1", "draws_from_p_after_a_rejection", WRONG, (
        (REJECT_ONE, REJECT_ONE.replace("residual(p, q)", "p")),
        (CHECKED, CHECKED + "    target = r\n"), (REJECT_ALL, REJECT_ALL.replace("(r,", "(target,"))),
        "after a rejection the token is drawn from p instead of the residual"),
    Variant("task2_1", "accepts_with_p", WRONG, (
        ("    if u * q[d] < p[d]:\n", "    if u < p[d]:\n"), ("        if u * q[d] < r[d]:\n", "        if u < r[d]:\n")),
        "accepts the draft with probability p(d), the rule of a deterministic draft, though d ~ q"),
    Variant("task2_1", "no_residual_update", WRONG, (
        ("        r = residual(r, q)\n", "        pass\n"), (REJECT_ALL, REJECT_ALL.replace("(r,", "(residual(r, q),"))),
        "every round tests its draft against p, not against the residual the rejections before left"),
    Variant("task2_1", "last_token_from_p", WRONG, ((REJECT_ALL, REJECT_ALL.replace("(r,", "(p,")),),
        "the rounds are right, but when every draft is rejected the token is drawn from p"),
    Variant("task2_1", "token_as_a_tensor", WRONG, ((REJECT_ONE, REJECT_ONE.replace("int(torch", "(torch").replace(
        "generator)), False", "generator))[0], False")),),
        "after a rejection accept_one returns the token as a 1-element tensor, not an int"),
    Variant("task2_1", "other_uniform", EQUIVALENT, (
        (ONE_DRAW, "    u = 1 - torch.rand((), dtype=torch.float64, generator=generator)\n    if u < p[d] / q[d]:\n"),
        (ROUND_DRAW, "        if accept_one(r, q, d, generator)[1]:\n")),
        "accepts when 1 - u < p(d) / q(d), and runs each round of accept_several through accept_one"),
    Variant("task2_1", "bernoulli", EQUIVALENT, (
        (ONE_DRAW, "    if torch.bernoulli((p[d] / q[d]).clamp(max=1), generator=generator):\n"),
        (ROUND_DRAW, "        if torch.bernoulli((r[d] / q[d]).clamp(max=1), generator=generator):\n")),
        "accepts with torch.bernoulli(min(1, p(d) / q(d))) instead of comparing a uniform"),
    Variant("task2_1", "residual_first", EQUIVALENT, (
        (ONE_DRAW, "    left = (p - q).clamp(min=0)\n"
                   "    other = int(torch.multinomial(left / left.sum(), 1, generator=generator)) if left.sum() > 0 else d\n"
                   + ONE_DRAW),
        (REJECT_ONE, "    return other, False\n")),
        "accept_one draws the replacement token from the residual before it tests the draft"),
)

# --- task 2.2: ladref/minimal.py ---------------------------------------------------------------
ACCEPT = "        accepted = verify(candidates, int(preds[0]), preds[L:].view(len(candidates), N - 1))\n"
HARVEST = "        if step >= N - 2:\n"
CANDIDATES = "        candidates = pool.get(pending[-1], [])[:G]\n"
COMMIT = ("        for token in accepted:\n            out.append(token)\n"
          "            if len(out) == max_new_tokens or token == eos_token_id:\n                return out\n")
CROP = ("        if extra:  # crop(-k) drops the last k entries (in older transformers, crop(0) empties the cache)\n"
        "            cache.crop(-extra)\n")

TASK2_2 = (
    Variant("task2_2", "drops_the_next_token", WRONG, ((ACCEPT, ACCEPT + "        accepted = accepted[:-1] or accepted\n"),),
            "after an accepted candidate prefix, drops the model's own next token (the +1 token)"),
    Variant("task2_2", "harvests_from_step_0", WRONG, ((HARVEST, "        if step >= 0:\n"),),
            "harvests the window's columns from the first step on, the prompt's filler included"),
    Variant("task2_2", "harvests_from_step_N_1", WRONG, ((HARVEST, "        if step >= N - 1:\n"),),
            "harvests the window's columns one step late, from step index N-1 on"),
    Variant("task2_2", "no_window_slide", WRONG, (("        window = torch.cat([window, new_row[None]])[1:].clone()\n",
                                                   "        window = window.clone()\n"),),
            "keeps the same window every step instead of dropping its first row and taking the new one"),
    Variant("task2_2", "no_prompt_seeding", WRONG, (("    seed_pool(pool, prompt, N, G)\n", ""),),
            "starts with an empty pool instead of the prompt's n-grams"),
    Variant("task2_2", "one_token_a_step", WRONG, ((CANDIDATES, "        candidates = []\n"),),
            "verifies no candidate: greedy decoding, one token a step"),
    Variant("task2_2", "returns_a_tensor", WRONG, (("                return out\n", "                return torch.tensor(out)\n"),),
            "returns the tokens as a tensor instead of a list of ints"),
    Variant("task2_2", "harvest_condition_rewritten", EQUIVALENT, ((HARVEST, "        if step + 2 >= N:\n"),),
            "writes the harvest's condition another way"),
    Variant("task2_2", "crops_by_the_step_width", EQUIVALENT, ((CROP, (
        "        surplus = input_ids.shape[1] - len(pending)\n        if surplus > 0:\n            cache.crop(-surplus)\n")),),
            "counts the entries to drop from the step's width instead of the cache's length"),
    Variant("task2_2", "candidates_reversed", EQUIVALENT, ((CANDIDATES, CANDIDATES.replace("[:G]", "[:G][::-1]")),),
            "verifies the pool's candidates last to first: the pool keeps at most G per token, so the same ones are "
            "verified, and every longest agreeing candidate accepts the same tokens"),
    Variant("task2_2", "commits_by_slicing", EQUIVALENT, ((COMMIT, (
        "        out.extend(accepted)\n        ends = [i + 1 for i, t in enumerate(out) if t == eos_token_id][:1]\n"
        "        if ends or len(out) >= max_new_tokens:\n            return out[: min([max_new_tokens, *ends])]\n")),),
            "appends the step's tokens at once, then cuts the output at eos_token_id or max_new_tokens"),
)

# --- one plausible mistake in each of the other tasks --------------------------------------------
OTHERS = (
    Variant("task1_1", "row_0_own_column_only", WRONG, ((
        "            row0_prefix = (r[None, :] == 0) & (c[None, :] <= c[:, None])\n",
        "            row0_prefix = (r[None, :] == 0) & (c[None, :] == c[:, None])\n"),),
        "a window cell sees only its own column of row 0, not row 0 up to its column"),
    Variant("task1_2", "oldest_first", WRONG, (("        entries.move_to_end(rest, last=False)  # most recent first\n", ""),),
            "keeps the continuations oldest first, so candidates come in the wrong order and the newest is evicted"),
    Variant("task1_3", "no_token_after_the_path", WRONG, ((
        "    return Verdict(torch.tensor([tokens[i] for i in path] + [target]), path)\n",
        "    return Verdict(torch.tensor([tokens[i] for i in path] or [target]), path)\n"),),
        "drops the model's own token after an accepted path"),
    Variant("task1_4", "commits_the_current_token_only", WRONG, ((
        "    runner.commit(past, torch.cat([torch.tensor([0]), layout.tree_index()[verdict.path]]))\n",
        "    runner.commit(past, torch.tensor([0]))\n"),),
        "commits the current token's keys and values but not the accepted path's"),
    Variant("task1_5", "path_leaf_first", WRONG, (("        return nodes[::-1]\n", "        return nodes\n"),),
            "returns a node's path from the node up to the root instead of root first"),
    Variant("task1_6", "sources_without_the_frontier", WRONG, ((
        "    return torch.where(k < counts[:, None], frontier + entries, targets), targets\n",
        "    return torch.where(k < counts[:, None], entries, targets), targets\n"),),
        "reads the accepted entries' slots as if the step started at slot 0, not at the frontier"),
    Variant("task2_3", "feeds_nothing", WRONG, ((
        "        return tree.prune(fed_window[1] if window else bare[1]), window\n",
        "        return tree.prune(0), False\n"),),
        "never feeds a draft or the window: greedy decoding, one token a step"),
)

VARIANTS: tuple[Variant, ...] = (*TASK2_1, *TASK2_2, *OTHERS)


def variants(task: str | None = None) -> list[Variant]:
    """The registered variants, of one task (its marker) or of all."""
    return [v for v in VARIANTS if task is None or v.task == task]
