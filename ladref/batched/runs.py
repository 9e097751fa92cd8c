"""Equal keys among each row's node slots, found by sorting: O(B n log n) where a pairwise test is O(B n^2).

A row's n draft slots are sorted by their keys (stably, so equal keys stay in slot order); the
slots with equal keys then form one run of that order. Two questions about a slot's run are
answered from it, for every row at once: its smallest flagged slot (`first_in_run`, the node a
merged path keeps) and how many flagged slots of it come before the slot (`earlier_in_run`, a
node's rank among its siblings). A pairwise (B, n, n) test answers both too, at a cost that grows
as B n^2: the wide merged proposals of a large batch (n = 111, B = 16) made it the largest host
work of a step. The keys of token paths are their `path_code`; `lexsort` orders by several keys
(the lookahead pool's `merge`, the policy's nodes by value).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def runs(key: torch.Tensor, split: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's slots sorted by `key`, equal keys in slot order, and the run of each sorted place.

    Args:
        key: (B, n) long.
        split: (B, n) long, a second key that never decreases along the slots (`Drafts.source`: each
            source's slots after the one before's), or None. Equal keys stay in slot order, so in
            `split` order too: one sort groups the pairs, and a run also ends where `split` changes.

    Returns:
        order: (B, n) long, the slots in sorted order; run: (B, n) long, the run (0, 1, ...) of each
        sorted place: places share a run exactly when their keys (and splits) are equal.
    """
    moved, order = key.sort(dim=1, stable=True)
    if key.shape[1] == 0:  # no slot: no run
        return order, order
    change = moved.diff(dim=1) != 0  # (B, n - 1): a sorted place whose keys differ from the one before
    if split is not None:
        change |= split.gather(1, order).diff(dim=1) != 0
    return order, F.pad(change, (1, 0)).cumsum(1)


def first_in_run(order: torch.Tensor, run: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
    """(B, n) long: for each slot, the smallest slot of its run with `flag` ((B, n) bool; n where none)."""
    n = order.shape[1]
    member = torch.where(flag.gather(1, order), order, n)  # (B, n) sorted places: the flagged slots
    low = torch.full_like(order, n).scatter_reduce_(1, run, member, "amin")  # (B, n) per run
    return torch.empty_like(order).scatter_(1, order, low.gather(1, run))


def earlier_in_run(order: torch.Tensor, run: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
    """(B, n) long: for each slot, the slots of its run before it (smaller) with `flag` ((B, n) bool)."""
    counted = flag.gather(1, order).long()
    before = counted.cumsum(1) - counted  # flagged places before each sorted place, in the whole row
    start = torch.full_like(order, order.shape[1]).scatter_reduce_(1, run, before, "amin")  # before each run's first place
    return torch.empty_like(order).scatter_(1, order, before - start.gather(1, run))


def path_code(spelled: torch.Tensor) -> torch.Tensor:
    """(...,) int64 codes of (..., D) token paths: equal paths have equal codes (a sum of the tokens
    times pseudo-random 64-bit weights, one per column, wrapping; two different paths share a code
    with negligible odds, and `ladref.batched.drafts.merge` checks a match token by token before it merges)."""
    weights = (torch.arange(1, spelled.shape[-1] + 1, device=spelled.device) * 0x3C6EF372FE94F82B) ^ 0x1B873593
    weights = (weights ^ (weights >> 29)) * 0x2545F4914F6CDD1D  # a splitmix-like scramble of the column index
    return ((spelled + 3) * (weights ^ (weights >> 32))).sum(-1)


def lexsort(keys: list[torch.Tensor]) -> torch.Tensor:
    """(B, L) long: the order sorting each row by `keys` ((B, L) each, the first the most significant), stable."""
    order = keys[-1].sort(dim=1, stable=True).indices  # the least significant first
    for key in reversed(keys[:-1]):
        order = order.gather(1, key.gather(1, order).sort(dim=1, stable=True).indices)
    return order
