"""The captured program: one batched step of fixed shapes, and what it can take.

`captured_step` is the whole step (`ladref.batched.step.BatchStep`: plan, forward, verify, commit,
learn) as one function of tensors, its shapes fixed by the host's two ints (the draft nodes fed and
whether the window is); `ladref.batched.captured.CapturedBatchDecoder` compiles it whole and runs
it. The helpers here say what it can take (`capturable`, `check_node_widths`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import check_int
from .loop import step_log
from .state import BatchState
from .step import BatchStep


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


def captured_step(step: BatchStep, state: BatchState, nodes: int, window: bool, cells: int, sources: int) -> torch.Tensor:
    """One step of every row, `nodes` draft-node positions and the window (when `window`) fed, nothing read back.

    Returns:
        (B, 3 + 2S) long, the step's log (`ladref.batched.loop.step_log`); (B, 1), the tokens kept, for a plain step.
    """
    if step.plain:  # greedy decoding: the current token alone
        before = state.produced.clone()
        step.run_plain(state)
        return (state.produced - before)[:, None]
    plan = step.plan(state)
    outcome = step.run(state, plan, nodes, window)
    return step_log(outcome, cells, sources)
