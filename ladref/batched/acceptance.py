"""Acceptance, learned for every row of a batch at once: the one-prompt oracle's (``tests/oracle_acceptance.py``) as tensors.

Each row keeps its own rates, per (source, evidence, depth, sibling rank): how often a draft node
whose parent was right turned out right too, as Beta counts in a (B, K) table. Every step's
proposals are remembered (a ring of the last D + 1 steps' proposals: a node D deep is judged
within D steps, each step adding at least one token), each node with its key and the token path
it spells; once the text holds the position a node drafted, the node is judged against it,
whether it was fed or not (greedy's text is fixed: a counterfactual verification, no forward
pass). A node's value is the product of the rates along its path in its own source's tree.

The probes (each step's best draft-only choice) keep each row's `trust`, as in the one-prompt
policy; the window's value is what the window's source's tree matched beyond the best other
source's tree of the same step, once the step's proposals are all judged (when its slot of the
ring is taken again).
"""

from __future__ import annotations

import torch

from ..pricing.policy import PolicySettings
from .drafts import Merged
from .runs import earlier_in_run, path_code, runs

EVIDENCE, RANKS = 17, 16  # grades 0..16 and sibling ranks 0..15 are kept apart; larger ones share the last


def own_ranks(merged: Merged) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, n) each node's rank among its siblings in its own source's trie, and (B, n) bool whether
    it is the first node of its path in that trie (the node the source's own tree has). Both by
    sorting the slots (`ladref.batched.runs`): the first valid slot of its (source, path) run, and
    the first nodes before it in its (source, parent) run."""
    drafts = merged.drafts
    rows, n = drafts.tokens.shape
    parents = drafts.parents if drafts.parents.dim() == 2 else drafts.parents.expand(rows, n)
    source = drafts.source.expand(rows, n)
    if merged.code is None:  # a trie: every valid node is its own path's first
        first, parent = drafts.valid, parents
    else:
        first = drafts.valid & (earlier_in_run(*runs(merged.code, source), drafts.valid) == 0)
        parent = path_code(merged.spelled[..., 1:])  # the parent's path
    return earlier_in_run(*runs(parent, source), first), first


class Acceptance:
    """Every row's learned acceptance: rates, pending proposals, trust and the window's value.

    Args:
        rows: B; sources: S; depth: the deepest node any source drafts.
        settings: the prior and the window's source (`ladref.pricing.policy.PolicySettings`).
        window_source: the index of the source whose drafts the window keeps fresh (-1: none).
        device: the model's.
    """

    def __init__(self, rows: int, sources: int, depth: int, settings: PolicySettings, window_source: int,
                 device: torch.device) -> None:
        self.dims, self.sources = (sources, EVIDENCE, depth + 1, RANKS), sources
        keys = sources * EVIDENCE * (depth + 1) * RANKS
        a, b = settings.prior
        self.accepted = torch.full((rows, keys), a, dtype=torch.float64, device=device)
        self.reached = torch.full((rows, keys), b, dtype=torch.float64, device=device)
        self.expected = torch.full((rows,), 2.0, dtype=torch.float64, device=device)
        self.matched = torch.full((rows,), 2.0, dtype=torch.float64, device=device)
        self.window_value = torch.zeros(rows, dtype=torch.float64, device=device)
        self.window_source, self.depth = window_source, depth
        self.ring: dict[str, torch.Tensor] | None = None  # the pending proposals: (P, B, ...) each
        self.won: torch.Tensor | None = None
        self.slot = torch.zeros((), dtype=torch.long, device=device)  # proposals remembered so far
        self.seen: torch.Tensor | None = None  # (B,) each row's text length when the last proposal was made

    @property
    def trust(self) -> torch.Tensor:
        """(B,) draft tokens the probes matched per draft token they expected (0.2..1.5)."""
        return (self.matched / self.expected).clamp(0.2, 1.5)

    def keys(self, merged: Merged) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n) each proposed node's rate key, and (B, n) bool the nodes of the sources' own tries."""
        _, evidence, depth, ranks = self.dims
        rank, first = own_ranks(merged)
        drafts = merged.drafts
        grade = drafts.evidence[:, drafts.source].clamp(max=evidence - 1)
        key = ((drafts.source * evidence + grade) * depth + merged.depth.clamp(max=depth - 1)) * ranks + rank.clamp(max=ranks - 1)
        return key, first

    def values(self, merged: Merged, key: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """(B, n) each node's probability of acceptance: the rates' product along its path in its own source's tree."""
        rate = self.accepted.gather(1, key) / self.reached.gather(1, key)
        ext = torch.cat([torch.where(first, rate, 0.0), torch.ones_like(rate[:, :1])], dim=1)
        return ext.gather(1, merged.table.flatten(1)).view(merged.table.shape).prod(-1)

    def remember(self, merged: Merged, key: torch.Tensor, first: torch.Tensor, probe: torch.Tensor, expected: torch.Tensor,
                 position: torch.Tensor, length: torch.Tensor) -> None:
        """Keep this step's proposals to judge them as the text grows.

        Args:
            probe: (B, n) bool, the probe's nodes; expected: (B,) the draft tokens it expects.
            position: (B,) the current tokens' positions; length: (B,) the texts' lengths now.
        """
        drafts, n = merged.drafts, key.shape[1]
        entry = {"tokens": torch.where(drafts.valid, drafts.tokens, -1), "up": merged.table[..., 1:], "key": key,
                 "alive": first, "probe": probe, "depth": merged.depth, "base": position, "source": drafts.source.expand_as(key)}
        if self.ring is None or self.ring["key"].shape[2] < n:  # (re)made for the widest proposals
            self.ring = {name: torch.zeros((self.depth + 1, *t.shape[:1], n, *t.shape[2:]) if t.dim() > 1 else
                                           (self.depth + 1, *t.shape), dtype=t.dtype, device=t.device) for name, t in entry.items()}
        width = self.ring["key"].shape[2]
        if n < width:  # "past the root" is the ring's width, where `observe` puts its True
            entry["up"] = torch.where(entry["up"] == n, width, entry["up"])
        at = (self.slot % (self.depth + 1))[None]  # (1,) a tensor: a captured step keeps one program at every slot
        self._settle(at)
        for name, value in entry.items():
            ring = self.ring[name]
            if value.dim() > 1 and value.shape[1] < ring.shape[2]:  # narrower proposals than the ring's: the rest stays empty
                value = torch.cat([value, value.new_zeros(value.shape[0], ring.shape[2] - value.shape[1], *value.shape[2:])], 1)
            ring.index_copy_(0, at, value[None])
        self.won.index_fill_(0, at, 0)
        self.slot.add_(1)
        self.expected.add_(expected)
        self._saw(length)

    def _settle(self, at: torch.Tensor) -> None:
        """Slot `at`'s proposals are all judged (a node is at most D deep): the window's value moves
        toward what the window's source matched beyond the best other source (0 for a slot never used)."""
        if self.won is None:
            self.won = torch.zeros(self.depth + 1, *self.expected.shape, self.sources, dtype=torch.float64,
                                   device=self.expected.device)  # (P, B, S) right nodes per source: its tree's matched depth
            return
        if self.window_source < 0:
            return
        won = self.won.index_select(0, at)[0]
        others = torch.cat([won[:, : self.window_source], won[:, self.window_source + 1 :]], dim=1)
        best = others.max(-1).values if others.shape[1] else torch.zeros_like(won[:, 0])
        self.window_value.copy_(0.9 * self.window_value + 0.1 * (won[:, self.window_source] - best).clamp(min=0))

    def observe(self, text: torch.Tensor, length: torch.Tensor, tokens: torch.Tensor) -> None:
        """The texts grew from `seen` to `length` ((B,) each): judge every pending node whose position is now known.

        Args:
            text: (B, X) the rows' texts; tokens: (B,) the tokens the step accepted (unused: the text holds them).
        """
        if self.ring is None:  # nothing proposed yet
            return
        ring, rows = self.ring, text.shape[0]
        base, depth, up = ring["base"], ring["depth"], ring["up"]  # (P, B), (P, B, n), (P, B, n, D - 1)
        at = (base[..., None] + depth.clamp(min=1)).clamp(max=text.shape[1] - 1)  # (P, B, n) each node's position
        truth = text.gather(1, at.transpose(0, 1).flatten(1)).view(at.shape[1], at.shape[0], -1).transpose(0, 1)
        own = ring["tokens"] == truth  # (P, B, n): each node's own token is greedy's (an ancestor's: its own)
        ext = torch.cat([own, torch.ones_like(own[..., :1])], dim=-1)  # (P, B, n + 1): past the root matches
        reached = ext.gather(2, up.flatten(2)).view(up.shape).all(-1)  # every ancestor matches
        right = reached & own
        known = base[..., None] + depth
        judged = ring["alive"] & (known <= (length - 1)[None, :, None]) & (known > (self.seen - 1)[None, :, None])
        ring["alive"].logical_and_(~judged)  # in place, as all a step carries (`ladref.batched.resident`)
        flat = ring["key"].transpose(0, 1).reshape(rows, -1)
        self.reached.scatter_add_(1, flat, (judged & reached).transpose(0, 1).reshape(rows, -1).double())
        self.accepted.scatter_add_(1, flat, (judged & right).transpose(0, 1).reshape(rows, -1).double())
        hits = judged & right  # (P, B, n)
        self.won.scatter_add_(2, ring["source"], hits.double())
        self.matched.add_((hits & ring["probe"]).sum((0, 2)))
        self._saw(length)

    def _saw(self, length: torch.Tensor) -> None:
        """`seen` := the texts' lengths now ((B,) long): a copy, in place once made (`length` is the state's
        own, which the next step's commit moves; an alias would judge no node ever again)."""
        if self.seen is None:
            self.seen = length.clone()
        else:
            self.seen.copy_(length)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep`."""
        for name in ("accepted", "reached", "expected", "matched", "window_value"):
            setattr(self, name, getattr(self, name).index_select(0, keep))
        if self.ring is not None:
            self.ring = {name: t.index_select(1, keep) for name, t in self.ring.items()}
            self.won = self.won.index_select(1, keep)
        self.seen = None if self.seen is None else self.seen.index_select(0, keep)
