"""The captured program: one batched step of fixed shapes, and what it can take.

`captured_step` is the whole step (`ladref.batched.step.BatchStep`: forward, verify, commit, learn,
then the next step's plan) as one function of tensors, its shapes fixed by the host's two ints (the
draft nodes fed and whether the window is). It plans the next step at its end, so the shape the
host reads between steps is that of the plan the next step runs, chosen after this step's outcome.
`ladref.batched.captured.CapturedBatchDecoder` compiles it whole and runs it. The helpers here say
what it can take (`capturable`, `check_node_widths`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import check_int
from .loop import step_log
from .state import BatchState
from .step import BatchStep, Plan


def check_node_widths(widths: Sequence[int] | None) -> tuple[int, ...]:
    """The draft-node counts an adaptive captured decoder compiles, sorted (default 0, 1, 2, 4, ... 64)."""
    if widths is None:
        return (0, 1, 2, 4, 8, 16, 32, 64)
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise TypeError(f"widths must be a non-empty sequence of node counts, got {widths!r:.40}")
    for w in widths:
        check_int("a width", w, 0)
    return tuple(sorted(set(widths)))


def capturable() -> tuple[type, ...]:
    """The proposers whose batch forms keep one shape from step to step (the only ones a captured step takes)."""
    from ..sources.jacobi import JacobiProposer
    from ..sources.lookahead import LookaheadProposer
    from ..sources.prompt_lookup import PromptLookupProposer
    from ..sources.recycling import RecyclingProposer

    return JacobiProposer, PromptLookupProposer, LookaheadProposer, RecyclingProposer


def captured_step(step: BatchStep, state: BatchState, plan: Plan | None, nodes: int, window: bool, cells: int,
                  sources: int) -> tuple[torch.Tensor, Plan | None]:
    """One step of every row, `nodes` draft-node positions and the window (when `window`) fed, nothing
    read back; then the next step's plan, so that the host reads its shape with the stop flags.

    Args:
        plan: this step's `Plan` (steps 1-2, made by the step before: its feed fits `nodes` and
            `window`); None for greedy decoding and plain sampling.

    Returns:
        (B, 3 + 2S) long, the step's log (`ladref.batched.loop.step_log`), and the next step's plan;
        (B, 1), the tokens kept, and None for a plain step.
    """
    if step.plain:  # greedy decoding: the current token alone
        before = state.produced.clone()
        step.run_plain(state)
        return (state.produced - before)[:, None], None
    outcome = step.run(state, plan, nodes, window)  # 3.-6. forward, verify, commit, learn
    return step_log(outcome, cells, sources), step.plan(state)  # 1.-2. of the next step: propose, merge, choose
