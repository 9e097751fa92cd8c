"""Where drafts come from: the `Proposer` protocol and the `StepOutcome` a proposer learns from.

Draft-free speculative methods differ only in where their drafts come from. A proposer turns
what has been decoded so far into a `DraftTree` of guesses for the tokens after the current one,
and learns from what each step fed and what the model predicted there. One step then verifies
the merged tree of every proposer in ONE forward pass (`ladref.step.draft_step`):

    propose -> one forward -> harvest -> verify -> commit -> learn

A proposer written by a user plugs into the same loop (`ladref.draft_decode`); it needs a name,
three methods and three options, which `DraftSource` gives at their defaults (inherit it):

* ``window`` (default None): a `ladref.sources.lookahead.LookaheadWindow` the step must feed as its
  lookahead branch (the paper's 2-D Jacobi window; at most one per step);
* ``topk`` (default 0): an int k > 0 asks for the model's top-k next tokens at EVERY position the
  step feeds (`StepOutcome.top`), as Token Recycling's adjacency matrix needs;
* ``evidence`` (default 0): an int, read right after ``propose``, grading that proposal (prompt
  lookup: the length of the suffix it matched); adaptive decoding learns acceptance apart for
  each grade.

`step_needs` says what a set of proposers asks of every step (the window, the top-k, the reach).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import torch

from .config import window_reach
from .tree import DraftTree

REQUIRED = ("name", "begin", "propose", "learn")
OPTIONS = ("window", "topk", "evidence")
MAX_DRAFT_DEPTH = 16  # the deepest draft checked against the context before a call, when a decoder takes any proposers


@dataclass(frozen=True)
class StepOutcome:
    """What one step fed, what the model predicted and what was accepted.

    Attributes:
        position: p, the absolute position of the current token (the step's first input).
        input_ids: (q,) every token fed, current token first (window cells, then tree nodes).
        tree: the draft tree that was verified.
        tokens: the accepted tokens (1 + len(path)), the last one the model's own.
        path: the accepted tree nodes, root's child first.
        root_pred: the model's argmax after the current token.
        node_preds: (n,) the model's argmax after each tree node.
        harvest: (N, W) the lookahead trajectory whose columns are new n-grams, or None (no
            window this step, or its rows are not all model outputs yet).
        top: (q, k) the top-k next tokens after every fed token, when a proposer asked (else None).
        window_tokens: tokens of the lookahead branch fed besides the current token.
    """

    position: int
    input_ids: torch.Tensor
    tree: DraftTree
    tokens: list[int]
    path: list[int]
    root_pred: int
    node_preds: torch.Tensor
    harvest: torch.Tensor | None = None
    top: torch.Tensor | None = None
    window_tokens: int = 0

    @property
    def fed(self) -> int:
        """q, tokens fed to the model."""
        return self.input_ids.shape[0]

    def cut(self, kept: int) -> "StepOutcome":
        """This outcome as far as a request that stopped inside the step kept it: its first `kept`
        tokens (1 <= kept) and the path nodes they spell (itself when it kept them all)."""
        if kept >= len(self.tokens):
            return self
        return replace(self, tokens=self.tokens[:kept], path=self.path[: kept - 1])


class Window(Protocol):
    """A lookahead branch a step feeds (`ladref.sources.lookahead.LookaheadWindow`).

    Attributes:
        grid: (N-1, W) long, the window's rows, oldest first; cell (0, 0) is replaced by the current token.
    """

    grid: torch.Tensor

    def advance(self, fed: torch.Tensor, new_row: torch.Tensor) -> torch.Tensor | None:
        """Slide after a step fed `fed` ((N-1)*W,) and predicted `new_row` (W,); returns the
        (N, W) trajectory to harvest, or None."""


@runtime_checkable
class Proposer(Protocol):
    """A draft source: proposes a tree for the current token and learns from each step.

    Attributes:
        name: the source's name, recorded on its tree nodes and in the statistics.
        window: the lookahead window the step must feed, or None.
        topk: k > 0 asks for the model's top-k next tokens after every fed token (0: none).
        evidence: the grade of the latest proposal, read right after `propose` (0: ungraded).
    """

    name: str
    window: Window | None
    topk: int
    evidence: int

    def begin(self, prompt: Sequence[int]) -> None:
        """Start a new call on `prompt` (reset or keep state: the proposer's choice)."""

    def propose(self, context: Sequence[int]) -> DraftTree:
        """A tree of drafts continuing ``context[-1]``, the current token (empty: no draft)."""

    def learn(self, outcome: StepOutcome) -> None:
        """Update from a finished step (the tokens it accepted, the predictions it made)."""


class DraftSource:
    """A base for proposers: the protocol's options at their defaults (no window, no top-k,
    ungraded proposals). Subclasses set ``name`` and write ``begin``, ``propose`` and ``learn``."""

    window: Window | None = None
    topk: int = 0
    evidence: int = 0


@dataclass(frozen=True)
class StepNeeds:
    """What a set of proposers asks of every step.

    Attributes:
        window: the one lookahead window to feed, or None.
        topk: the largest top-k asked for (0: none).
        reach: positions past the current token a step may touch: the deepest draft, or the
            window's reach W + N (`ladref.config.window_reach`), whichever is further.
    """

    window: Window | None
    topk: int
    reach: int


def step_needs(proposers: Sequence[Proposer], max_depth: int = 0) -> StepNeeds:
    """The `StepNeeds` of checked proposers (`check_proposers`) whose drafts are at most `max_depth` deep."""
    window = next((p.window for p in proposers if p.window is not None), None)
    reach = max_depth if window is None else max(max_depth, window_reach(window.grid.shape[1], window.grid.shape[0] + 1))
    return StepNeeds(window, max(p.topk for p in proposers), reach)


def check_proposers(proposers: object) -> list[Proposer]:
    """Validate a proposer or a sequence of them; returns a list.

    Raises:
        TypeError: a class instead of an instance, an object lacking a member or an option of the
            protocol (named), or a ``topk`` that is not an int.
        ValueError: no proposer, two lookahead windows, or a negative ``topk``.
    """
    items = [proposers] if not isinstance(proposers, (list, tuple)) else list(proposers)
    if not items:
        raise ValueError("proposers must hold at least one proposer")
    for p in items:
        if isinstance(p, type):
            raise TypeError(f"{p.__name__} is a class; pass an instance of it (e.g. {p.__name__}())")
        missing = [m for m in REQUIRED if not hasattr(p, m)]
        missing += [m for m in REQUIRED[1:] if m not in missing and not callable(getattr(p, m))]
        options = [m for m in OPTIONS if not hasattr(p, m)]
        if missing or options:
            hint = " (inherit ladref.DraftSource for the options' defaults: window=None, topk=0, evidence=0)" if options else ""
            raise TypeError(f"{type(p).__name__} does not implement the Proposer protocol: missing "
                            f"{', '.join(missing + options)}{hint}")
        if not isinstance(p.name, str) or not p.name:
            raise TypeError(f"{type(p).__name__}.name must be a non-empty str, got {p.name!r}")
        if isinstance(p.topk, bool) or not isinstance(p.topk, int) or p.topk < 0:
            raise TypeError(f"{type(p).__name__}.topk must be an int >= 0, got {p.topk!r}")
    if sum(p.window is not None for p in items) > 1:
        raise ValueError("at most one proposer may bring a lookahead window")
    return items


def proposal(p: Proposer, context: Sequence[int], vocab: int) -> DraftTree:
    """``p.propose(context)``, checked.

    Raises:
        TypeError: the proposer returned something other than a `DraftTree`.
        ValueError: a draft token outside the vocabulary [0, vocab).
    """
    proposed = p.propose(context)
    if not isinstance(proposed, DraftTree):
        raise TypeError(f"{type(p).__name__}.propose must return a DraftTree, got {type(proposed).__name__}")
    if len(proposed) and (int(proposed.tokens.min()) < 0 or int(proposed.tokens.max()) >= vocab):
        raise ValueError(f"{type(p).__name__} proposed a token outside the model's vocabulary [0, {vocab})")
    return proposed


def propose_apart(proposers: Sequence[Proposer], context: Sequence[int], vocab: int) -> tuple[list[DraftTree], list[int]]:
    """Each proposer's checked tree (`proposal`) and its ``evidence``."""
    return [proposal(p, context, vocab) for p in proposers], [int(p.evidence) for p in proposers]


def merge_all(trees: Sequence[DraftTree]) -> DraftTree:
    """The trees merged into one trie, first tree first."""
    merged = DraftTree.empty()
    for tree in trees:
        merged = tree if not len(merged) else merged.merge(tree)
    return merged


def merged_tree(proposers: Sequence[Proposer], context: Sequence[int], vocab: int) -> DraftTree:
    """Every proposer's tree for the current token, merged into one trie (first proposer first).

    Raises:
        TypeError / ValueError: as `proposal`, for the first proposer whose tree is refused.
    """
    return merge_all([proposal(p, context, vocab) for p in proposers])
