"""The inputs of a batch's step: ``[current | lookahead window | draft nodes]`` for every row at once.

The layout of one row is the one-prompt step's (`ladref.masks`): the current token first, then
the (N-1, W) window row by row when the step feeds one (its cell (0, 0) replaced by the current
token), then the fed draft nodes; a window cell (r, c) sits at position p + r + c, a node at
p + its depth, p being the current token's position. Every row has the same layout, Q tokens
wide: the window's part is the same for all (a row that does not feed its window this step
still computes it, and nothing reads it), and a row feeding fewer nodes than the widest pads
its part with nodes that see only themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..masks import StepLayout
from ..tree import DraftTree
from .drafts import Fed


@dataclass(frozen=True, eq=False)
class WindowShape:
    """The lookahead branch's fixed part of every step: who sees whom, positions, the newest row.

    Attributes:
        size: W, columns; ngram: N (the window has N-1 rows).
        allowed: (L, L) bool, L = (N-1) W, the window's mask (`ladref.masks.StepLayout.allowed`).
        offsets: (L,) long, each cell's position past the current token's (row + column).
        last_row: (W,) long, the step positions of the newest row, whose predictions are the next row.
    """

    size: int
    ngram: int
    allowed: torch.Tensor
    offsets: torch.Tensor
    last_row: torch.Tensor

    @classmethod
    def of(cls, size: int, ngram: int, device: torch.device) -> "WindowShape":
        layout = StepLayout(size, ngram, DraftTree.empty())
        return cls(size, ngram, layout.allowed().to(device), layout.position_offsets().to(device),
                   layout.last_row_index().to(device))

    @property
    def length(self) -> int:
        """L, the lookahead branch's tokens, the current token included."""
        return (self.ngram - 1) * self.size


def step_inputs(current: torch.Tensor, position: torch.Tensor, fed: Fed, window: WindowShape | None = None,
                grid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every row's step, ``[current | window | nodes]``, Q = L + w tokens.

    Args:
        current: (B,) the current tokens; position: (B,) their positions.
        fed: the w draft nodes each row feeds (`ladref.batched.drafts.compact`).
        window: the window's shape, when this step feeds one (then `grid` too); None: L = 1.
        grid: (B, N-1, W) long, each row's window, oldest row first.

    Returns:
        ids (B, Q) long, positions (B, Q) long, allowed (B, Q, Q) bool (a node sees the current
        token, its ancestors and itself; the window its `WindowShape.allowed`).
    """
    rows, w = fed.tokens.shape
    if window is None:
        head, offsets = current[:, None], torch.zeros(1, dtype=torch.long, device=current.device)
    else:
        head = torch.cat([current[:, None], grid.flatten(1)[:, 1:]], dim=1)
        offsets = window.offsets
    length = head.shape[1]
    ids = torch.cat([head, fed.tokens], dim=1)
    positions = position[:, None] + torch.cat([offsets.expand(rows, length), fed.depth], dim=1)
    allowed = torch.zeros(rows, length + w, length + w, dtype=torch.bool, device=current.device)
    allowed[:, :length, :length] = True if window is None else window.allowed
    allowed[:, length:, length:] = fed.ancestors
    allowed[:, length:, 0] = True  # drafts continue the current token
    return ids, positions, allowed
