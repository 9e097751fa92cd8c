"""One decoding step for any draft source, and the one loop that repeats it.

A step feeds ``[current | lookahead window (optional) | draft tree]`` in ONE forward pass under
the combined mask (`ladref.masks`), then reads it top-down as the paper's figure:

1. propose: every proposer's tree for the current token, merged into one trie (the loop);
2. one forward pass over both branches;
3. harvest: the window's newest row is predicted, the window slides, its columns are n-grams;
4. verify: the longest tree path greedy agrees with, plus one token (or sampled: `ladref.sampling`);
5. commit: the current token's and the accepted path's K/V stay in the cache;
6. learn: every proposer sees the `StepOutcome` (the loop).

Between 1 and 2 the loop asks a `StepChoice` which proposed nodes to feed, and whether to feed
the window: `DraftBudget` feeds everything (up to a budget of nodes), adaptive decoding's
policy (`ladref.fast.adaptive`) what this machine can afford. The output is exactly greedy's whatever
the proposers drafted and the choice fed: drafts only decide how many tokens one step may accept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from .call import TokenSink
from .masks import StepLayout, build_step_inputs
from .proposer import Proposer, StepOutcome, Window, merge_all, propose_apart, step_needs
from .results import DecodeStats
from .runner import Runner
from .sampling import Chooser
from .tree import DraftTree
from .verify import verify_chosen, verify_greedy


def kept_rows(layout: StepLayout, window: bool, topk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows whose logits the step keeps, and where in them the window's newest row and the tree sit.

    Args:
        layout: the step's layout (q = ``layout.length`` rows; W window columns; n tree nodes).
        window: whether a window is fed.
        topk: > 0 keeps every row (the top-k of every fed token is wanted).

    Returns:
        (rows, last, nodes): rows (k,) the step indices to keep, current token first; last (W,)
        or (0,) and nodes (n,) index into the kept logits.
    """
    if topk:  # every row kept: the kept logits are indexed like the step
        return torch.arange(layout.length), layout.last_row_index(), layout.tree_index()
    last = layout.last_row_index() if window else torch.empty(0, dtype=torch.long)
    rows = torch.cat([torch.tensor([0]), last, layout.tree_index()])  # current token, newest window row, tree
    return rows, torch.arange(1, 1 + len(last)), torch.arange(1 + len(last), len(rows))


def draft_step(
    runner: Runner,
    current: int,
    tree: DraftTree,
    window: Window | None = None,
    chooser: Chooser | None = None,
    context: Sequence[int] | None = None,
    topk: int = 0,
) -> StepOutcome:
    """Feed, verify and commit one step (the step's steps 2-5).

    Args:
        runner: model and KV cache; the cache holds everything before `current`.
        current: the last accepted token.
        tree: the drafts to verify (empty: one greedy token, plus the window if any).
        window: the lookahead window to feed and slide, or None.
        chooser: None for greedy verification, else picks each verified token (`verify_chosen`).
        context: the committed sequence ending with `current` (for the chooser's logits processors).
        topk: > 0 returns the top-k next tokens after every fed token (`StepOutcome.top`).

    Returns:
        The `StepOutcome` (a step with nothing to verify is a `plain_step`).
    """
    if window is None and chooser is None and not len(tree):  # nothing to verify: no tree to lay out
        return plain_step(runner, current, tree, topk)
    past = runner.past_len
    step = build_step_inputs(current, None if window is None else window.grid, tree, past)
    layout = step.layout
    # 2. One forward pass over both branches (a plain causal one when the step is a single chain).
    rows, last, nodes = kept_rows(layout, window is not None, topk)
    logits = runner.forward(step.input_ids, step.position_ids, None if layout.is_causal else step.allowed, rows)  # (k, V)
    preds = logits.argmax(dim=-1).cpu()  # (k,)
    # 3. Harvest: the window's newest row predicts the next one; the window slides by one row.
    harvest = None if window is None else window.advance(step.input_ids[: layout.lookahead_len], preds[last])
    # 4. Verify: the longest tree path greedy agrees with, plus one token (or the chooser's walk).
    if chooser is None:
        verdict = verify_greedy(tree, int(preds[0]), preds[nodes])
    else:
        verdict = verify_chosen(tree, logits[0], logits[nodes], chooser.choose, [current] if context is None else context)
    # 5. Commit the current token and the accepted path's K/V to the cache.
    runner.commit(past, torch.cat([torch.tensor([0]), layout.tree_index()[verdict.path]]))
    return StepOutcome(position=past, input_ids=step.input_ids, tree=tree, tokens=verdict.tokens.tolist(), path=verdict.path,
                       root_pred=int(preds[0]), node_preds=preds[nodes], harvest=harvest,
                       top=logits.topk(topk, dim=-1).indices.cpu() if topk else None, window_tokens=layout.lookahead_len - 1)


def plain_step(runner: Runner, current: int, tree: DraftTree, topk: int = 0) -> StepOutcome:
    """`draft_step` with nothing to verify (an empty `tree`, no window, greedy): the current token
    alone is fed and its argmax accepted. The outcome is the one a laid-out step gives; a row of a
    busy batch, drafting nothing, takes this step at every pass."""
    past, input_ids = runner.past_len, torch.tensor([current])
    logits = runner.forward(input_ids, torch.tensor([past]), None, torch.tensor([0]))  # (1, V)
    pred = int(logits[0].argmax())
    runner.commit(past, torch.tensor([0]))
    return StepOutcome(position=past, input_ids=input_ids, tree=tree, tokens=[pred], path=[], root_pred=pred,
                       node_preds=torch.empty(0, dtype=torch.long), top=logits.topk(topk, dim=-1).indices.cpu() if topk else None)


class StepChoice(Protocol):
    """What each step feeds, chosen from the proposed trees (the loop's hook; `DraftBudget`,
    the engines' rules in `ladref.bench.engines`, the course's task 2.3).

    Optionally also ``may_draft(kv, window_cells) -> bool``, asked before each later step's
    drafts are proposed: False skips proposing them, and `choose` gets no trees (a choice
    without it always has them proposed; the engines' rules have it).
    """

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        """(the tree to feed, whether to feed the window) at KV length `kv`; `window_cells`: the
        window's cells besides the current token, None without a window."""

    def observe(self, tokens: Sequence[int]) -> None:
        """The tokens the step accepted (before the proposers learn)."""

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        """What the whole step cost: `fed` tokens at KV length `kv`, proposing the next trees included."""


@dataclass(frozen=True)
class DraftBudget:
    """The trivial choice: every proposed node merged into one trie (its first `budget` nodes,
    parents before children, when a budget is set), and the window at every step."""

    budget: int | None = None

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        tree = merge_all(trees)
        return (tree if self.budget is None else tree.prune(self.budget)), True

    def observe(self, tokens: Sequence[int]) -> None:
        pass

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        pass


def run_drafting(
    runner: Runner,
    prompt: torch.Tensor,
    proposers: Sequence[Proposer],
    sink: TokenSink,
    stats: DecodeStats,
    chooser: Chooser | None = None,
    position_limit: int | None = None,
    choice: StepChoice | None = None,
    max_depth: int | None = None,
) -> None:
    """Prefill, then run draft steps until `sink` is done (every tree decoder's loop). The prefill is
    deferred: the prompt but its last token runs in the first step's pass, before the step's tokens.

    Args:
        runner: a runner with an empty cache (a static runner's prefill starts a new call).
        prompt: (L,) prompt ids.
        proposers: the draft sources (checked by `ladref.proposer.check_proposers`).
        sink: collects the accepted tokens and decides when to stop.
        stats: filled in place.
        chooser: None for greedy decoding.
        position_limit: the model's context length; drafts that would pass it are dropped.
        choice: what each step feeds; default `DraftBudget()`, every proposed node and the window.
        max_depth: the deepest draft node fed (deeper nodes are cut from every proposer's tree, as
            the batched step cuts them); None: as deep as the proposers draft.
    """
    choice = DraftBudget() if choice is None else choice
    may_draft = getattr(choice, "may_draft", None)  # optional (`StepChoice`)
    needs = step_needs(proposers)
    cells = None if needs.window is None else needs.window.grid.numel() - 1
    context = prompt.tolist()
    for proposer in proposers:
        proposer.begin(list(context))
    # 1. Propose: each source's tree, kept apart until the choice (the first step's are checked
    #    before any forward pass, the prompt's included).
    trees, evidence = propose_apart(proposers, context, runner.vocab_size)
    current = runner.prefill(prompt, stats, defer=True)  # the prompt is cached in the first step's pass
    while True:
        start, kv = time.perf_counter(), runner.past_len
        depths = [d for d in (None if position_limit is None else position_limit - 1 - kv, max_depth) if d is not None]
        if depths:  # the context's room and max_depth: the tighter bound cuts every tree
            trees = [tree.within_depth(min(depths)) for tree in trees]
        tree, feed_window = choice.choose(trees, evidence, kv, cells)  # what this step feeds
        outcome = draft_step(runner, current, tree, needs.window if feed_window else None, chooser, context, needs.topk)  # 2-5
        kept = sink.extend(outcome.tokens)
        stats.record_step(kept, outcome.fed, outcome.window_tokens, tree, outcome.path)
        # 6. Learn: the choice sees the accepted tokens; every source sees what the step fed, predicted and accepted,
        #    cut to what the request kept when it stopped inside the step (a memory of outputs records no more).
        choice.observe(outcome.tokens)
        learned = outcome.cut(kept)
        for proposer in proposers:
            proposer.learn(learned)
        if sink.done:
            return
        context.extend(outcome.tokens)
        current = outcome.tokens[-1]
        if may_draft is None or may_draft(runner.past_len, cells):  # 1. propose the next step's drafts
            trees, evidence = propose_apart(proposers, context, runner.vocab_size)
        else:  # no draft could pay: none proposed
            trees, evidence = [], []
        if stats.steps > 1:  # step 1's pass also cached the prompt: not a step's time
            choice.timed(outcome.fed, kv, time.perf_counter() - start)
