"""One decoding step for any draft source, and the loop that repeats it.

A step feeds ``[current | lookahead window (optional) | draft tree]`` in ONE forward pass under
the combined mask (`ladref.masks`), then reads it top-down as the paper's figure:

1. propose: every proposer's tree for the current token, merged into one trie (the loop);
2. one forward pass over both branches;
3. harvest: the window's newest row is predicted, the window slides, its columns are n-grams;
4. verify: the longest tree path greedy agrees with, plus one token (or sampled: `ladref.sampling`);
5. commit: the current token's and the accepted path's K/V stay in the cache;
6. learn: every proposer sees the `StepOutcome` (the loop).

The output is exactly greedy's whatever the proposers drafted: drafts only decide how many
tokens one step may accept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .call import TokenSink
from .masks import build_step_inputs
from .proposer import Proposer, StepOutcome, Window, merged_tree
from .results import DecodeStats
from .runner import Runner
from .sampling import Chooser
from .tree import DraftTree
from .verify import verify_chosen, verify_greedy


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
        The `StepOutcome`.
    """
    past = runner.past_len
    step = build_step_inputs(current, None if window is None else window.grid, tree, past)
    layout = step.layout
    # 2. One forward pass over both branches (a plain causal one when the step is a single chain).
    rows = torch.arange(layout.length) if topk else torch.cat([torch.tensor([0]), layout.last_row_index() if window is not None
                                                               else torch.empty(0, dtype=torch.long), layout.tree_index()])
    logits = runner.forward(step.input_ids, step.position_ids, None if layout.is_causal else step.allowed, rows)  # (k, V)
    preds = logits.argmax(dim=-1).cpu()
    tree_rows = layout.tree_index() if topk else torch.arange(len(rows) - len(tree), len(rows))
    # 3. Harvest: the window's newest row predicts the next one; the window slides by one row.
    harvest = None
    if window is not None:
        last = layout.last_row_index() if topk else torch.arange(1, 1 + layout.window_size)
        harvest = window.advance(step.input_ids[: layout.lookahead_len], preds[last])
    # 4. Verify: the longest tree path greedy agrees with, plus one token (or the chooser's walk).
    if chooser is None:
        verdict = verify_greedy(tree, int(preds[0]), preds[tree_rows])
    else:
        verdict = verify_chosen(tree, logits[0], logits[tree_rows], chooser.choose, [current] if context is None else context)
    # 5. Commit the current token and the accepted path's K/V to the cache.
    runner.commit(past, torch.cat([torch.tensor([0]), layout.tree_index()[verdict.path]]))
    top = logits.topk(topk, dim=-1).indices.cpu() if topk else None
    return StepOutcome(past, step.input_ids, tree, verdict.tokens.tolist(), verdict.path, int(preds[0]), preds[tree_rows],
                       harvest, top, layout.lookahead_len - 1)


def run_drafting(
    runner: Runner,
    prompt: torch.Tensor,
    proposers: Sequence[Proposer],
    sink: TokenSink,
    stats: DecodeStats,
    chooser: Chooser | None = None,
    position_limit: int | None = None,
    draft_budget: int | None = None,
) -> None:
    """Prefill, then run draft steps until `sink` is done (every tree decoder's loop).

    Args:
        runner: a runner with an empty cache (a static runner's prefill starts a new call).
        prompt: (L,) prompt ids.
        proposers: the draft sources (checked by `ladref.proposer.check_proposers`).
        sink: collects the accepted tokens and decides when to stop.
        stats: filled in place.
        chooser: None for greedy decoding.
        position_limit: the model's context length; drafts that would pass it are dropped.
        draft_budget: most tree nodes fed per step (the first ones, parents before children).
    """
    window = next((p.window for p in proposers if getattr(p, "window", None) is not None), None)
    topk = max(getattr(p, "topk", 0) for p in proposers)
    context = prompt.tolist()
    for proposer in proposers:
        proposer.begin(list(context))
    # 1. Propose: every source's drafts for the current token, merged into one trie (the first
    #    step's are checked before any forward pass, the prompt's included).
    tree = merged_tree(proposers, context, runner.vocab_size)
    current = runner.prefill(prompt, stats)
    while True:
        if position_limit is not None:
            tree = tree.within_depth(position_limit - 1 - runner.past_len)
        if draft_budget is not None:
            tree = tree.prune(draft_budget)
        outcome = draft_step(runner, current, tree, window, chooser, context, topk)  # steps 2-5
        stats.record_step(sink.extend(outcome.tokens), outcome.fed, outcome.window_tokens, tree, outcome.path)
        # 6. Learn: every source sees what the step fed, predicted and accepted.
        for proposer in proposers:
            proposer.learn(outcome)
        if sink.done:
            return
        context.extend(outcome.tokens)
        current = outcome.tokens[-1]
        tree = merged_tree(proposers, context, runner.vocab_size)  # 1. propose the next step's drafts
