"""Probes of task 1.6: commit plans, commits on a labelled cache, and batches driven by hand, against the reference's.

A plan case is a step drawn in the reference's run: the frontier and each row's entries (0, then
a path's step entries, then leftovers past its count, as a verdict leaves them) and count, 1 to K;
some entries are a column slice (not contiguous); a few batches have no row at all (B = 0). A labelled case fills every layer of a
`BatchCache` with entries named by their row and slot (holes among the committed slots) and
commits one step. The tensor-program cases run the plan and the commit on meta tensors, for 2B and
3B rows. A hand-driven case runs `BatchCache` here: a prefill of prompts of different lengths, then
steps of random trees (a mask of ancestors, positions by depth, padding up to the widest row) or
of one token, each row keeping a random root-to-node path, rows sometimes leaving (`select`);
after each step, every live row's logit gap to a plain pass, its marked slots, and its cache's gap
to a plain forward over its committed tokens (rounded: 0.0 when right).
"""

from __future__ import annotations

import random
from functools import cache

import torch
from probing import Group, on_meta, random_tree
from strategies import build_tiny

from ladref.batched.cache import BatchCache, ragged_commit_plan
from ladref.facts import check_model
from ladref.kernels import sdpa_backends
from ladref.runner import ModelRunner

# hand-driven batches: (architecture, vocabulary, model seed)
MODELS = [("llama", 16, 0), ("qwen2", 16, 1), ("gpt2", 32, 2)]


@cache
def model_of(arch: str, vocab: int, seed: int) -> torch.nn.Module:
    return build_tiny(arch, vocab, seed)


def new_cache(model: torch.nn.Module, rows: int) -> BatchCache:
    facts = check_model(model)
    return BatchCache(model, facts, sdpa_backends("auto", facts.device, facts.attention), rows)


def plan_case(rng: random.Random, k: int, rows: int, widest: int, furthest: int, empty: bool = False) -> dict:
    """A step of 1..`rows` rows (none when `empty`), K up to `widest`, the frontier up to `furthest`."""
    b, depth = 0 if empty else rng.randint(1, rows), rng.randint(1, widest)
    width = depth + rng.randint(0, 4)  # Q: the step's entries, K of which a row may keep
    counts = [rng.choice([1, depth, rng.randint(1, depth)]) for _ in range(b)]
    entries = [[0, *sorted(rng.sample(range(1, width), c - 1)), *(rng.randrange(width) for _ in range(depth - c))]
               for c in counts]  # the current token's, then a path's (increasing), then leftovers
    return {"id": f"B{b}-K{depth}-{k}", "frontier": rng.randint(0, furthest), "entries": entries, "counts": counts,
            "K": depth, "sliced": k % 3 == 2}


def as_tensors(case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's (B, K) entries (a column slice of a wider tensor when "sliced") and (B,) counts."""
    entries = torch.tensor(case["entries"], dtype=torch.long).view(len(case["counts"]), case["K"])
    entries = torch.nn.functional.pad(entries, (1, 2))[:, 1:-2] if case["sliced"] else entries
    return entries, torch.tensor(case["counts"], dtype=torch.long)


def plan(case: dict) -> dict:
    """The two tensors' values, dtypes and shapes, and whether the arguments were left unchanged."""
    entries, counts = as_tensors(case)
    before = (entries.clone(), counts.clone())
    sources, targets = ragged_commit_plan(case["frontier"], entries, counts)
    return {"sources": sources.tolist(), "targets": targets.tolist(), "dtypes": [str(sources.dtype), str(targets.dtype)],
            "shapes": [list(sources.shape), list(targets.shape)],
            "arguments unchanged": bool(torch.equal(before[0], entries) and torch.equal(before[1], counts))}


def labelled_case(rng: random.Random, k: int, rows: int, widest: int, furthest: int, empty: bool = False) -> dict:
    """A plan case with the slots each row holds before the frontier (holes among them)."""
    case = plan_case(rng, k, rows, widest, furthest, empty)
    # Q, the step's entries: past every entry, and at least K (a row keeps at most the K it was fed; fewer slots than
    # K would put the plan's targets past the cache, which no step makes)
    case["width"] = max(max((max(row) for row in case["entries"]), default=0) + 1, case["K"]) + rng.randint(0, 2)
    case["held"] = [[rng.random() < 0.7 for _ in range(case["frontier"])] for _ in case["counts"]]
    return case


def filled(rows: int, t: int, q: int, held: torch.Tensor, device: str = "cpu") -> BatchCache:
    """A `BatchCache` of `rows` rows at frontier `t` whose every layer holds T + Q entries named by their row and slot
    (row * 1000 + slot + layer in every head and feature; values: the negative), its rows holding the slots `held`
    ((B, T) bool) before the frontier. On the meta device: shapes only."""
    batch = new_cache(model_of(*MODELS[0]), rows)
    names = torch.arange(rows, dtype=torch.float64)[:, None] * 1000 + torch.arange(t + q)
    names = names[:, None, :, None].expand(rows, 2, t + q, 3)
    with torch.inference_mode():
        for i in range(len(batch.cache.layers)):
            batch.cache.update((names + i).to(device), (-names - i).to(device), i)
        batch.frontier = t
        batch._room(t + q)
        batch.bias[:, :t].masked_fill_(held, 0)
        batch.bias = batch.bias.to(device)
    return batch


def labelled(case: dict) -> dict:
    """Commit one step into a cache whose entries name their row and slot; what every layer then holds."""
    entries, counts = as_tensors(case)
    rows, t = entries.shape[0], case["frontier"]
    batch = filled(rows, t, case["width"], torch.tensor(case["held"], dtype=torch.bool).view(rows, t))
    before = (entries.clone(), counts.clone())
    with torch.inference_mode():
        batch.commit(entries, counts)
    layers = [{name: [(sign * full[:, 0, :, 0] - i).round().long().tolist(), bool((full == full[:, :1, :, :1]).all())]
               for name, sign, full in (("keys", 1, layer.keys), ("values", -1, layer.values))}
              for i, layer in enumerate(batch.cache.layers)]  # each row's names by slot; every head and feature moved together
    return {"layers": layers, "marked": [(row == 0).nonzero().flatten().tolist() for row in batch.bias],
            "frontier": batch.frontier,
            "arguments unchanged": bool(torch.equal(before[0], entries) and torch.equal(before[1], counts))}


def program(case: dict) -> dict:
    """Whether the plan and the commit run on meta tensors (nothing read back), and run the same operations for
    the case's rows twice over and three times over (no loop over rows; one row alone may index differently)."""
    entries, counts = as_tensors(case)
    t, q = case["frontier"], int(entries.max()) + 1
    found = {}

    def commit(e: torch.Tensor, c: torch.Tensor):
        batch = filled(e.shape[0], t, q, torch.zeros(e.shape[0], t, dtype=torch.bool), "meta")
        return lambda: batch.commit(e, c)

    for name, make in (("plan", lambda e, c: lambda: ragged_commit_plan(t, e, c)), ("commit", commit)):
        runs = [on_meta(make(entries.repeat(n, 1).to("meta"), counts.repeat(n).to("meta"))) for n in (2, 3)]
        found[f"{name} on meta tensors"] = runs[0][0]
        found[f"{name}: the same operations for 2B and 3B rows"] = runs[0] == runs[1]
    return found


def root_paths(parents: list[int]) -> list[list[int]]:
    """Each step entry's root path in step entries: entry 0 the current token, entry i + 1 node i."""
    paths = [[0]]
    for i, parent in enumerate(parents):
        paths.append(paths[parent + 1] + [i + 1])  # a parent always comes before its children
    return paths


def plain_logits(model: torch.nn.Module, committed: list[int], tokens: list[int], paths: list[list[int]]) -> torch.Tensor:
    """(len(tokens), V): a plain pass over `committed`, then the step's tokens, each seeing its root path."""
    c, q = len(committed), len(tokens)
    allowed = torch.ones(c + q, c + q, dtype=torch.bool).tril()
    allowed[c:, c:] = False
    for i, path in enumerate(paths):
        allowed[c + i, [c + j for j in path]] = True
    positions = torch.cat([torch.arange(c), c + torch.tensor([len(p) - 1 for p in paths])])
    return ModelRunner(model).forward(torch.tensor(committed + tokens), positions, allowed, torch.arange(c, c + q))


def cache_gaps(batch: BatchCache, model: torch.nn.Module, committed: list[list[int]]) -> list:
    """For each live row: how far its cached keys/values at its marked slots are from a plain forward
    over its committed tokens (or what is wrong with its marked slots)."""
    gaps = []
    for b, tokens in enumerate(committed):
        slots = (batch.bias[b] == 0).nonzero().flatten()
        if len(slots) != len(tokens) or (len(slots) and int(slots[-1]) >= batch.frontier):
            gaps.append(f"{len(slots)} slots marked for {len(tokens)} committed tokens (frontier {batch.frontier})")
            continue
        alone = ModelRunner(model)
        alone.forward(torch.tensor(tokens))
        gaps.append(round(max(float((mine[b][:, slots] - plain[0]).abs().max()) for ours, theirs in zip(batch.cache.layers,
                    alone.cache.layers) for mine, plain in ((ours.keys, theirs.keys), (ours.values, theirs.values))), 6))
    return gaps


def step_inputs(step: dict, committed: list[list[int]]) -> tuple:
    """The step's (B, Q) ids and positions, (B, Q, Q) mask (each entry sees its root path; padding past a row's tree
    is a node under the current token), (B, K) entries and (B,) counts, and each row's root paths."""
    rows, q, k = len(step["rows"]), step["width"], step["keep"]
    ids, positions = torch.zeros(rows, q, dtype=torch.long), torch.ones(rows, q, dtype=torch.long)
    allowed = torch.eye(q, dtype=torch.bool).repeat(rows, 1, 1)
    allowed[:, :, 0] = True
    entries, counts, paths_of = torch.zeros(rows, k, dtype=torch.long), torch.zeros(rows, dtype=torch.long), []
    for b, row in enumerate(step["rows"]):
        paths_of.append(root_paths(row["parents"]))
        ids[b, : len(paths_of[b])] = torch.tensor(row["tokens"])
        for i, path in enumerate(paths_of[b]):
            allowed[b, i, path] = True
            positions[b, i] = len(path) - 1
        positions[b] += len(committed[b])
        kept = paths_of[b][row["node"]]
        entries[b], counts[b] = torch.tensor(kept + row["garbage"][: k - len(kept)]), len(kept)
    return ids, positions, allowed, entries, counts, paths_of


def one_step(batch: BatchCache, model: torch.nn.Module, committed: list[list[int]], step: dict) -> list:
    """One pass of every live row, then each row's commit of its chosen path (a one-token step: its token, committed
    where the pass wrote it, as greedy decoding's); each row's logit gap."""
    ids, positions, allowed, entries, counts, paths_of = step_inputs(step, committed)
    if step["one token"]:
        logits = batch.forward(ids[:, :1], positions[:, :1], None, torch.zeros(1, dtype=torch.long))
        batch.frontier += 1
    else:
        logits = batch.forward(ids, positions, allowed, torch.arange(ids.shape[1]))
    gaps = []
    for b, row in enumerate(step["rows"]):
        n = len(paths_of[b])
        gaps.append(round(float((logits[b, :n] - plain_logits(model, committed[b], row["tokens"], paths_of[b])).abs().max()), 6))
        committed[b] += [row["tokens"][i] for i in paths_of[b][row["node"]]]
    if not step["one token"]:
        batch.commit(entries, counts)
        batch.advance(int(counts.max()))
    return gaps


def drive(case: dict) -> list[dict]:
    """Prefill, then steps: each row commits its chosen path; rows may leave before a step."""
    model = model_of(*case["model"])
    prompts = [torch.tensor(p) for p in case["prompts"]]
    batch = new_cache(model, len(prompts))
    committed = [p[:-1] for p in case["prompts"]]
    seen = []
    with torch.inference_mode():  # as in a decoding call
        batch.prefill(prompts, "auto")
        for step in case["steps"]:
            if step["leave"]:
                stay = [b for b in range(len(committed)) if b not in step["leave"]]
                batch.select(torch.tensor(stay))
                committed = [committed[b] for b in stay]
            gaps = one_step(batch, model, committed, step)
            seen.append({"logit gaps": gaps, "frontier": batch.frontier,
                         "marked": [(row == 0).nonzero().flatten().tolist() for row in batch.bias],
                         "cache gaps": cache_gaps(batch, model, committed)})
    return seen


def driven_case(rng: random.Random, k: int, rows: int, steps: int, most: int) -> dict:
    """A batch of 2..`rows` prompts of different lengths and `steps` steps of trees of up to `most` drafts."""
    arch, vocab, seed = MODELS[k % len(MODELS)]
    n = rng.randint(2, rows)
    prompts = [[rng.randrange(vocab) for _ in range(rng.choice([1, rng.randint(2, 9)]))] for _ in range(n)]
    alive, planned = n, []
    for _ in range(steps):
        leave = sorted(rng.sample(range(alive), rng.randint(1, alive - 1))) if alive > 1 and rng.random() < 0.25 else []
        alive -= len(leave)
        one = rng.random() < 0.2
        trees = [random_tree(rng, 0 if one else most, vocab) for _ in range(alive)]
        width = 1 + max(len(t["parents"]) for t in trees) + (0 if one else rng.randint(0, 2))
        step = {"leave": leave, "one token": one, "width": width, "rows": []}
        for tree in trees:
            paths = root_paths(tree["parents"])
            step["rows"].append({"tokens": [rng.randrange(vocab), *tree["tokens"]], "parents": tree["parents"],
                                 "node": rng.randrange(len(paths)), "garbage": [rng.randrange(width) for _ in range(width)]})
        deepest = max(len(root_paths(row["parents"])[row["node"]]) for row in step["rows"])
        step["keep"] = min(width, deepest + rng.randint(0, 2))  # K: at least every row's count
        planned.append(step)
    return {"id": f"{arch}-B{n}-{k}", "model": [arch, vocab, seed], "prompts": prompts, "steps": planned}


def warm_up() -> None:
    """Build the tiny models before any case is timed (a model class's first use imports it)."""
    for arch, vocab, seed in MODELS:
        model_of(arch, vocab, seed)


GROUPS = {
    "plan (small steps)": Group(plan, 2, visible=True),
    "plan": Group(plan, 2),
    "commit on a labelled cache (small)": Group(labelled, 1, visible=True),
    "commit on a labelled cache": Group(labelled, 1),
    "a tensor program: no read back, no loop over rows": Group(program, 1, visible=True),
    "a batch driven by hand (short)": Group(drive, 1, visible=True),
    "a batch driven by hand": Group(drive, 2),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    return {
        "plan (small steps)": [plan_case(rng, k, 3, 4, 10, empty=k == 14) for k in range(15)],
        "plan": [plan_case(rng, k, 12, 16, 300, empty=k == 39) for k in range(40)],
        "commit on a labelled cache (small)": [labelled_case(rng, k, 3, 4, 8, empty=k == 5) for k in range(6)],
        "commit on a labelled cache": [labelled_case(rng, k, 8, 12, 40, empty=k == 14) for k in range(15)],
        "a tensor program: no read back, no loop over rows": [plan_case(rng, k, 4, 5, 10) for k in range(4)],
        "a batch driven by hand (short)": [driven_case(rng, k, 3, 3, 4) for k in range(3)],
        "a batch driven by hand": [driven_case(rng, k, 6, 6, 10) for k in range(9)],
    }
