"""Probes of task 2.3: a cost-aware step choice, judged by the modelled time of the decodes it drives.

Each case decodes a prompt with a tiny float64 model (`strategies.build_tiny`) and lookahead
and/or prompt-lookup proposers (`ladref.decoders.draft.decode_with_proposers`), the submission's
``CostAwareChoice(cost)`` choosing every step; ``cost(q, kv)`` prices a pass on the case's
surface, CPU-like (growing with q from the first token, and with kv) or GPU-like (flat up to a
knee of 64 to 256 tokens, then linear). The answer is the tokens and each step's
``[fed, kv, accepted]``, from the decode's own statistics. The grader's judge ("modelled_time",
``answer_diff.py``) prices the steps on the case's surface with the same formula as `step_cost`
here, in its own process: greedy's tokens (the reference's) at most ``tolerance`` times the
reference's modelled time pass. The gate group compares the tokens only.

Every tree the choice returns must be part of the proposed trie (each node a path some proposer
drafted): drafts made up from elsewhere (the model reached through gc or globals) fail the case.
Hidden cases use other surfaces, larger windows, longer prompts and more tokens than the visible
ones and than any public test.
"""

from __future__ import annotations

import random

import torch
from probing import Group
from strategies import ARCHITECTURES, build_tiny

from ladref import LookaheadConfig, LookaheadProposer, PromptLookupProposer
from ladref.course_choice import CostAwareChoice
from ladref.decoders.draft import decode_with_proposers
from ladref.proposer import MAX_DRAFT_DEPTH, merge_all
from ladref.tree import DraftTree

TOLERANCE = 1.10  # a speed case passes at most this many times the reference's modelled time


def step_cost(surface: dict, q: int, kv: int) -> float:
    """``answer_diff.step_cost``'s formula (the grader's; tests/test_open_task.py checks they agree)."""
    over = max(q - surface["knee"], 0)
    return surface["base"] + surface["per_kv"] * kv + over * (surface["per_token"] + surface["per_token_kv"] * kv)


class Guarded:
    """The submission's choice, each tree it returns checked against the proposed trie."""

    def __init__(self, choice) -> None:
        self.choice = choice
        if hasattr(choice, "may_draft"):  # optional in `ladref.step.StepChoice`: forwarded only when there
            self.may_draft = choice.may_draft

    def choose(self, trees, evidence, kv, window_cells):
        merged = merge_all(trees)
        proposed = DraftTree(merged.tokens.clone(), merged.parents.clone(), merged.sources)
        tree, window = self.choice.choose(list(trees), list(evidence), kv, window_cells)
        if type(tree) is not DraftTree or not isinstance(window, bool):
            raise TypeError(f"choose must return (DraftTree, bool), got ({type(tree).__name__}, {type(window).__name__})")
        try:
            proposed.locate(tree)
        except ValueError as exc:
            raise ValueError(f"choose returned a path no proposer drafted: {exc}") from None
        return tree, window

    def observe(self, tokens) -> None:
        self.choice.observe(list(tokens))

    def timed(self, fed, kv, seconds) -> None:
        self.choice.timed(fed, kv, seconds)


def proposers_of(specs: list) -> list:
    made = []
    for name, *args in specs:
        if name == "lookahead":
            W, N, G = args
            made.append(LookaheadProposer(LookaheadConfig(window_size=W, ngram_size=N, max_candidates=G)))
        else:
            made.append(PromptLookupProposer(draft_len=args[0], max_ngram=args[1]))
    return made


def decode(case: dict) -> dict:
    """The case's decode, the submission's choice at every step: tokens and [fed, kv, accepted] per step."""
    model = build_tiny(case["arch"], case["vocab"], case["seed"])
    surface = dict(case["surface"])

    def cost(q: int, kv: int) -> float:
        return step_cost(surface, q, kv)

    result = decode_with_proposers(model, torch.tensor(case["prompt"]), case["new_tokens"], proposers_of(case["proposers"]),
                                   "draft", MAX_DRAFT_DEPTH, {}, choice=lambda runner: Guarded(CostAwareChoice(cost)))
    steps, kv = [], len(case["prompt"]) - 1
    for fed, accepted in zip(result.stats.forward_tokens_per_step, result.stats.accepted_per_step):
        steps.append([int(fed), kv, int(accepted)])
        kv += int(accepted)
    return {"tokens": [int(t) for t in result.token_ids], "steps": steps}


def tokens_only(case: dict) -> list[int]:
    return decode(case)["tokens"]


def prompt(rng: random.Random, vocab: int, longest: int) -> list[int]:
    """A repetitive prompt (a short period, now and then broken), as real text is."""
    period = [rng.randrange(vocab) for _ in range(rng.randint(2, 4))]
    text = (period * longest)[: rng.randint(longest // 2 + 1, longest)]
    return [rng.randrange(vocab) if rng.random() < 0.15 else token for token in text]


def proposers(rng: random.Random, widest: int, lookup: bool) -> list:
    """A lookahead window (W up to `widest`, G = W), with prompt lookup beside it when `lookup`."""
    W = rng.randint(6, widest)
    specs = [["lookahead", W, rng.choice((4, 5)), W]]
    if lookup:
        specs.append(["prompt_lookup", rng.randint(4, 8), rng.choice((2, 3))])
    return specs


def cpu(rng: random.Random, ridge: tuple[int, int], kv_growth: float) -> dict:
    """A CPU-like surface: a pass's cost grows from the first token (doubling at q = ridge), and with kv."""
    base = 0.02
    per_token = base / rng.uniform(*ridge)
    return {"kind": "cpu", "base": base, "per_token": per_token, "knee": 0, "per_kv": base * rng.uniform(0.0005, 0.002),
            "per_token_kv": per_token * rng.uniform(0, kv_growth)}


def gpu(rng: random.Random, knees: tuple[int, ...], kv_growth: float) -> dict:
    """A GPU-like surface: flat up to the knee, then linear (doubling again within another knee or two)."""
    base, knee = 0.01, rng.choice(knees)
    per_token = base / knee * rng.uniform(1, 2)
    return {"kind": "gpu", "base": base, "per_token": per_token, "knee": knee, "per_kv": base * rng.uniform(0.0005, 0.001),
            "per_token_kv": per_token * rng.uniform(0, kv_growth)}


def make_case(rng: random.Random, name: str, k: int, surface: dict, specs: list, longest: int, new_tokens: int) -> dict:
    arch, vocab = rng.choice(ARCHITECTURES), rng.choice((8, 16, 32))
    return {"id": f"{name}{k}-{arch}-V{vocab}", "arch": arch, "vocab": vocab, "seed": rng.randrange(4),
            "prompt": prompt(rng, vocab, longest), "proposers": specs, "new_tokens": new_tokens, "surface": surface,
            "tolerance": TOLERANCE}


GROUPS = {
    "greedy's tokens (small runs)": Group(tokens_only, 1, visible=True),
    "CPU-like surfaces (small runs)": Group(decode, 2, visible=True, judge="modelled_time"),
    "GPU-like surfaces (small runs)": Group(decode, 1, visible=True, judge="modelled_time"),
    "CPU-like surfaces": Group(decode, 5, judge="modelled_time"),
    "GPU-like surfaces": Group(decode, 1, judge="modelled_time"),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    # on a CPU, most cases pair the window with prompt lookup: the cost must choose between them;
    # a window alone makes feeding it (or nothing) right whenever it pays (or does not)
    return {
        "greedy's tokens (small runs)": [make_case(rng, "gate", k, cpu(rng, (12, 24), 0.005), proposers(rng, 10, k == 0), 8, 24)
                                         for k in range(2)],
        "CPU-like surfaces (small runs)": [make_case(rng, "cpu", k, cpu(rng, (8, 20), 0.005), proposers(rng, 10, True), 8, 32)
                                           for k in range(3)],
        "GPU-like surfaces (small runs)": [make_case(rng, "gpu", k, gpu(rng, (64, 96, 128), 0), proposers(rng, 10, k == 0), 8, 32)
                                           for k in range(2)],
        "CPU-like surfaces": [make_case(rng, "cpu", k, cpu(rng, (6, 24), 0.01), proposers(rng, 16, k < 4), 14, 48)
                              for k in range(5)],
        "GPU-like surfaces": [make_case(rng, "gpu", k, gpu(rng, (64, 128, 192, 256), 0.01), proposers(rng, 16, k != 1), 14, 48)
                              for k in range(3)],
    }


def warm_up() -> None:
    """Build one tiny model per family and run it once before any case is timed (a model class's first use
    imports it). Nothing here calls the submission: a choice that loops must fail its first case at the
    case's limit, not hang the warm-up."""
    for arch in ARCHITECTURES:
        with torch.inference_mode():
            build_tiny(arch, 8, 0)(torch.tensor([[1, 2]]))
