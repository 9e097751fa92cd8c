"""Probes of task 1.4: what `draft_step` feeds, keeps, harvests, accepts and commits, compared with the reference's.

Each run drives `draft_step` by hand, as `ladref.step.run_drafting` does, with one or several
draft sources (the lookahead window and pool, prompt lookup, Jacobi's chain, Token Recycling's
top-k tree), greedy or sampled, on tiny float64 models; the decoders that loop the step are
checked too.
"""

from __future__ import annotations

import random

import torch
from probing import Group, as_list, rows
from strategies import build_tiny

from ladref import (
    JacobiProposer,
    LookaheadConfig,
    LookaheadProposer,
    PromptLookupProposer,
    RecyclingProposer,
    TreeTemplate,
    draft_decode,
    jacobi_decode,
    lookahead_decode,
    prompt_lookup_decode,
    recycling_decode,
)
from ladref.proposer import merged_tree, step_needs
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.sampling import SamplingChooser, Warp
from ladref.step import draft_step


# (architecture, vocabulary, seed, prompt, proposers, steps, sampling (temperature, seed) or None)
RUNS = [
    ("llama", 16, 0, [1, 2, 3, 1, 2, 3, 1], [["lookahead", 3, 4, 3, True]], 10, None),
    ("llama", 8, 1, [5, 6, 7], [["lookahead", 4, 3, 2, False]], 10, None),
    ("qwen2", 16, 2, [4, 4, 2, 9, 4, 4], [["lookahead", 2, 5, 4, True]], 8, None),
    ("gpt2", 32, 3, [7, 1, 7, 1, 7], [["lookahead", 5, 2, 3, True]], 10, None),
    ("llama", 16, 3, [3], [["lookahead", 3, 3, 0, True]], 6, None),
    ("qwen2", 8, 0, [1, 2, 1, 2, 1, 2, 1, 2], [["prompt_lookup", 4, 2]], 8, None),
    ("llama", 16, 0, [1, 2, 3], [["jacobi", 4]], 8, None),
    ("gpt2", 16, 2, [3, 1, 4, 1, 5], [["recycling", 8, 3, 3]], 8, None),
    ("llama", 8, 2, [1, 2, 3, 1, 2], [["lookahead", 3, 3, 2, True], ["prompt_lookup", 3, 2]], 8, None),
    ("llama", 16, 0, [1, 2, 3, 1, 2, 3], [["lookahead", 3, 4, 3, True]], 8, (0.8, 0)),
    ("qwen2", 8, 1, [4, 5, 4, 5, 4], [["prompt_lookup", 3, 2], ["recycling", 6, 2, 3]], 8, (1.2, 1)),
]


def proposers_of(specs: list, vocab: int) -> list:
    made = []
    for name, *args in specs:
        if name == "lookahead":
            W, N, G, from_prompt = args
            made.append(LookaheadProposer(LookaheadConfig(window_size=W, ngram_size=N, max_candidates=G, pool_from_prompt=from_prompt)))
        elif name == "prompt_lookup":
            made.append(PromptLookupProposer(draft_len=args[0], max_ngram=args[1]))
        elif name == "jacobi":
            made.append(JacobiProposer(block_size=args[0]))
        else:
            size, topk, depth = args
            made.append(RecyclingProposer(vocab, template=TreeTemplate.best_first(size=size, topk=topk, depth=depth)))
    return made


def run_id(run: tuple) -> str:
    arch, vocab, seed, _, specs, _, sample = run
    sources = "+".join(f"{s[0]}{''.join(str(int(a)) for a in s[1:])}" for s in specs)
    return f"{arch}-V{vocab}-s{seed}-{sources}{'-sampled' if sample else ''}"


class SpyRunner:
    """A `ModelRunner` that records every forward and commit the step makes."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner, self.calls = runner, []
        self.vocab_size, self.device = runner.vocab_size, runner.device

    @property
    def past_len(self) -> int:
        return self.runner.past_len

    def forward(self, input_ids, position_ids=None, allowed=None, keep=None):
        q, past = input_ids.shape[0], self.runner.past_len
        positions = torch.arange(past, past + q) if position_ids is None else position_ids  # None: causal positions
        self.calls.append({"forward": [input_ids.tolist(), as_list(positions), None if allowed is None else rows(allowed),
                                       list(range(q)) if keep is None else as_list(keep)]})  # None: every row kept
        return self.runner.forward(input_ids, position_ids, allowed, keep)

    def commit(self, past_len, accepted):
        self.calls.append({"commit": [int(past_len), as_list(accepted)]})
        return self.runner.commit(past_len, accepted)


def drive(run: tuple, spy: bool = False):
    """Run the steps of `run` as `run_drafting` does; yields (runner, window, outcome, context) after each step."""
    arch, vocab, seed, prompt, specs, steps, sample = run
    model = build_tiny(arch, vocab, seed)
    proposers = proposers_of(specs, vocab)
    needs = step_needs(proposers)
    window, topk = needs.window, needs.topk
    chooser = None if sample is None else SamplingChooser(Warp(sample[0]), torch.Generator().manual_seed(sample[1]))
    context = list(prompt)
    for proposer in proposers:
        proposer.begin(list(context))
    runner = ModelRunner(model)
    current = runner.prefill(torch.tensor(prompt), DecodeStats())
    stepped = SpyRunner(runner) if spy else runner
    with torch.inference_mode():
        for _ in range(steps):
            tree = merged_tree(proposers, context, vocab)
            outcome = draft_step(stepped, current, tree, window, chooser, list(context), topk)
            yield stepped, window, outcome, context
            for proposer in proposers:
                proposer.learn(outcome)
            context.extend(int(t) for t in outcome.tokens)
            current = int(outcome.tokens[-1])


def trace(run: tuple) -> list[dict]:
    """What each step returned, and the cache and window after it."""
    seen = []
    for runner, window, outcome, _ in drive(run):
        seen.append({
            "position": int(outcome.position), "input_ids": as_list(outcome.input_ids), "fed": int(outcome.fed),
            "tokens": [int(t) for t in outcome.tokens], "path": [int(n) for n in outcome.path], "root_pred": int(outcome.root_pred),
            "node_preds": as_list(outcome.node_preds), "harvest": as_list(outcome.harvest), "top": as_list(outcome.top),
            "window_tokens": int(outcome.window_tokens), "past_len": runner.past_len,
            "window": None if window is None else [window.grid.tolist(), window.steps],
        })
    return seen


def calls(run: tuple) -> list[list[dict]]:
    """The runner calls of each step."""
    seen = []
    for runner, _, _, _ in drive(run, spy=True):
        seen.append(runner.calls)
        runner.calls = []
    return seen


def committed_cache(case: dict) -> dict:
    """After the last step: the committed tokens, the cache's length, and how far its keys and values
    are from a plain causal forward over those tokens (rounded: 0.0 when the step commits exactly)."""
    *_, (runner, _, _, context) = drive(tuple(case["run"]))  # `context` then holds every accepted token
    committed = context[:-1]  # the newest token is the next step's input, not yet in the cache
    fresh = ModelRunner(runner.model)
    fresh.forward(torch.tensor(committed))
    gaps = [max(float((ours.keys - theirs.keys).abs().max()), float((ours.values - theirs.values).abs().max()))
            if ours.keys.shape == theirs.keys.shape and ours.values.shape == theirs.values.shape else "shapes differ"
            for ours, theirs in zip(runner.cache.layers, fresh.cache.layers)]
    return {"committed": committed, "past_len": runner.past_len,
            "largest gap per layer": [g if isinstance(g, str) else round(g, 6) for g in gaps]}


# (decoder, architecture, vocabulary, seed, prompt, new tokens, options)
DECODES = [
    ("lookahead", "llama", 16, 0, [1, 2, 3], 30, {"W": 4, "N": 4, "G": 4}),
    ("lookahead", "gpt2", 8, 1, [5, 6, 7, 5, 6], 25, {"W": 2, "N": 5, "G": 2}),
    ("jacobi", "gpt2", 8, 1, [5, 6, 7, 5, 6], 20, {"block_size": 4}),
    ("prompt_lookup", "llama", 8, 3, [1, 2, 1, 2, 3, 1, 2], 25, {}),
    ("recycling", "gpt2", 16, 0, [3, 1, 4, 1, 5], 25, {}),
    ("draft", "llama", 16, 1, [2, 7, 2, 7, 2], 25, {}),
]


def decoded(case: list, sample: tuple | None = None) -> dict:
    name, arch, vocab, seed, prompt, new_tokens, options = case
    model = build_tiny(arch, vocab, seed)
    kwargs = {"eos_token_id": []}
    if sample is not None:
        kwargs.update(do_sample=True, temperature=sample[0], generator=torch.Generator().manual_seed(sample[1]))
    if name == "lookahead":
        config = LookaheadConfig(window_size=options["W"], ngram_size=options["N"], max_candidates=options["G"])
        result = lookahead_decode(model, prompt, new_tokens, config=config, **kwargs)
    elif name == "jacobi":
        result = jacobi_decode(model, prompt, new_tokens, block_size=options["block_size"], **kwargs)
    elif name == "prompt_lookup":
        result = prompt_lookup_decode(model, prompt, new_tokens, **kwargs)
    elif name == "recycling":
        result = recycling_decode(model, prompt, new_tokens, template=TreeTemplate.best_first(size=12, topk=3, depth=4), **kwargs)
    else:
        proposers = [LookaheadProposer(LookaheadConfig(3, 3, 2)), PromptLookupProposer(draft_len=4),
                     RecyclingProposer(vocab, template=TreeTemplate.best_first(size=6, topk=2, depth=3))]
        result = draft_decode(model, prompt, new_tokens, proposers=proposers, **kwargs)
    stats = result.stats
    return {"token_ids": result.token_ids, "accepted": stats.accepted_per_step, "fed": stats.forward_tokens_per_step,
            "window": stats.window_tokens_per_step, "by_source": {source: {str(k): n for k, n in sorted(histogram.items())}
                          for source, histogram in sorted(stats.accepted_by_source.items())}}  # JSON keys are strings


def warm_up() -> None:
    """Build one tiny model per family before any case is timed: the first use of a model class
    imports it, which takes seconds (and a timeout inside an import breaks it for the process)."""
    for arch in ("llama", "qwen2", "gpt2"):
        build_tiny(arch, 8, 0)


def random_decodes(rng: random.Random, count: int) -> list[dict]:
    """The decoders of `DECODES` on prompts drawn anew for each grading run."""
    cases = []
    for k in range(count):
        name, arch, vocab, seed, _, new_tokens, options = DECODES[k % len(DECODES)]
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 8))]
        cases.append({"id": f"{name}-{arch}-V{vocab}-{k}", "decode": [name, arch, vocab, seed, prompt, new_tokens, options]})
    return cases


def decode(case: dict) -> dict:
    return decoded(case["decode"], None if case.get("sample") is None else tuple(case["sample"]))


def step_trace(case: dict) -> list[dict]:
    return trace(tuple(case["run"]))


def runner_calls(case: dict) -> list[list[dict]]:
    return calls(tuple(case["run"]))


GROUPS = {
    "decoders (random prompts)": Group(decode, 1, visible=True),
    "sampled decoders (random prompts)": Group(decode, 1, visible=True),
    "step trace": Group(step_trace, 3),
    "runner calls": Group(runner_calls, 2),
    "committed cache": Group(committed_cache, 1),
    "decoders": Group(decode, 1),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    runs = [{"id": run_id(r), "run": list(r)} for r in RUNS]
    sampled = random_decodes(rng, 3)
    for k, case in enumerate(sampled):
        case["sample"] = [(0.7, 1.0, 1.5)[k], rng.randrange(1000)]
        case["id"] += f"-t{case['sample'][0]}"
    return {
        "decoders (random prompts)": random_decodes(rng, 6),
        "sampled decoders (random prompts)": sampled,
        "step trace": runs,
        "runner calls": runs,
        "committed cache": runs,
        "decoders": [{"id": f"{d[0]}-{d[1]}-V{d[2]}-s{d[3]}", "decode": list(d)} for d in DECODES],
    }
