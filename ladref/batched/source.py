"""Where a batch's drafts come from: the `BatchSource` protocol, the `Outcome` a source learns from, and
the `BatchChoice` of what each step feeds.

A `BatchSource` is the batch form of a `ladref.Proposer`: it proposes for every row at once, as
tensors of a fixed width (`ladref.batched.drafts.Drafts`), and learns from every row's step at
once, with no loop over rows and nothing read back to the host. ladref's own sources have one
each (`ladref.batched.sources`); any other `Proposer` runs in a batch through
`ladref.batched.sources.rows.RowProposers`, which calls it row by row on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from .drafts import Drafts, Fed, Merged
from .state import BatchState
from .verify import Verdict


@dataclass(frozen=True, eq=False)
class Outcome:
    """What one batched step fed, what the model predicted and what each row accepted.

    Attributes:
        ids: (B, Q) long, every token fed (the current token first, then the window, then nodes).
        preds: (B, Q) long, the argmax after each fed token (-1 where its logits were not computed:
            the window's older rows, when no source asked for every position's).
        top: (B, Q, k) long, the top-k after every fed token, when a source asked (else None).
        length: L, the step position of the first draft node (1 without a window).
        window: (B,) bool, the rows that fed their window this step (None: no window was fed).
        merged: every source's proposals, merged; fed: the nodes fed (`ladref.batched.drafts.compact`).
        verdict: what verification accepted (before the rows' stops cut it).
        kept: (B,) long, the tokens each row kept (its stop may cut the accepted ones).
    """

    ids: torch.Tensor
    preds: torch.Tensor
    top: torch.Tensor | None
    length: int
    window: torch.Tensor | None
    merged: Merged
    fed: Fed
    verdict: Verdict
    kept: torch.Tensor

    def node_preds(self, part: slice) -> torch.Tensor:
        """(B, n) the argmax after each node a source proposed in slots `part` (-1 where it was not fed)."""
        slot = self.fed.slot[:, part]
        return torch.where(slot >= 0, self.preds.gather(1, torch.where(slot >= 0, self.length + slot, 0)), -1)


@runtime_checkable
class BatchSource(Protocol):
    """A draft source for every row of a batch at once.

    Attributes:
        name: recorded in each row's ``stats.accepted_by_source``.
        depth: its deepest node (a chain of k: k), at most.
        topk: k > 0 asks for the top-k next tokens after every fed token (`Outcome.top`).
        window: None, or ``(W, N)`` when it brings the lookahead window: then ``grid`` is its
            (B, N-1, W) long window, which the step feeds where the choice says so.
    """

    name: str
    depth: int
    topk: int
    window: tuple[int, int] | None

    def begin(self, state: BatchState) -> None:
        """Start on the rows' prompts (``state.text``, ``state.length``)."""

    def propose(self, state: BatchState) -> Drafts:
        """(B, n) drafts continuing each row's current token. A tree whose shape never changes gives
        the same (n,) parents at every step (its ancestors are then worked out once); n may change
        from step to step only with (B, n) parents."""

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """Update from a step (``state`` already holds the kept tokens); `part`: this source's slots."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` ((B',) long, in order): finished rows left."""


@runtime_checkable
class Remembers(Protocol):
    """A batch source that keeps something across calls (prompt lookup's memory of earlier outputs)."""

    def finish(self, outputs: Sequence[Sequence[int]]) -> None:
        """The call's end: every row's output (its new tokens), in the batch's order."""


def remember(sources: Sequence[object], outputs: Sequence[Sequence[int]]) -> None:
    """Tell every source that remembers (`Remembers`) the rows' outputs, once a call has ended."""
    for source in sources:
        if isinstance(source, Remembers):
            source.finish(outputs)


class BatchChoice(Protocol):
    """What each row feeds at a step, chosen from the merged proposals (`FeedAll`; adaptive decoding's
    `ladref.batched.policy.BatchPolicy`).

    Optionally also (`ladref.batched.gate.Gate` asks for them; `BatchPolicy` has them):
    ``hope(state) -> (H,) long``, read with the loop's read; ``may_draft(rows, kv, window_cells,
    hope) -> bool``, asked on the host before each later step: False skips proposing, the step is
    bare (`ladref.batched.step.BatchStep.run_bare`); ``timed(passes, seconds)``, the passes
    ((q, rows, kv) each) run between two reads and the seconds between those reads.
    """

    def choose(self, merged: Merged, state: BatchState, window_cells: int | None, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        """((B, n) bool nodes to feed, ancestor-closed within ``merged.kept``; (B,) bool rows feeding
        the window). `window_cells`: the window's tokens besides the current one, None without one;
        `kv`: the cache slots the pass will attend to (the cache's ``attended``)."""

    def observe(self, state: BatchState, outcome: Outcome) -> None:
        """A step's outcome (after the sources learned)."""

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep`."""


@dataclass(frozen=True)
class FeedAll:
    """Every proposed node (the first `budget` of each row's merged trie, parents before children,
    when a budget is set) and the window, at every step: `ladref.step.DraftBudget` for a batch."""

    budget: int | None = None

    def choose(self, merged: Merged, state: BatchState, window_cells: int | None, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        feed = merged.kept if self.budget is None else merged.kept & (merged.kept.cumsum(-1) <= self.budget)
        return feed, torch.ones(state.size, dtype=torch.bool, device=feed.device)

    def observe(self, state: BatchState, outcome: Outcome) -> None:
        pass

    def select(self, keep: torch.Tensor) -> None:
        pass
