"""A batch's drafts as tensors: every row's draft nodes, merged into one trie, and the nodes a step feeds.

The one-prompt step keeps a draft tree as a `ladref.tree.DraftTree`; here each source fills n
node slots per row, the same n at every step, each slot with a token, a parent (an index into
the same n slots, -1 for the current token) and a flag saying whether the row drafted it there.
So a step's shapes never depend on what a row found, and every operation below runs over all
rows at once, with no loop over rows and nothing read back to the host.

* `ancestor_table`: each node's ancestors by pointer doubling, log2(depth) gathers (once per
  call for a source whose tree has a fixed shape: a chain, G chains, a template);
* `merge`: the trie of `DraftTree.merge`: nodes spelling the same token path are one node, the
  first (an earlier source's) kept, and a node whose parent was merged away hangs from the one
  that stayed;
* `compact`: the nodes a step feeds, moved to the front of each row in node order (a parent
  before its children), cut to the pass's width, with their ancestor matrix (the tree mask).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .runs import first_in_run, path_code, runs


def cached(method: Callable[[Any], torch.Tensor]) -> property:
    """`functools.cached_property` without the lock Python 3.11 takes (which torch.compile cannot trace): a
    property computed at its first read, kept in the instance's ``__dict__`` (frozen dataclasses allow it).
    Its setter is what torch.compile calls to rebuild an object a compiled function returns."""
    name = method.__name__

    def get(self: Any) -> torch.Tensor:
        if name not in self.__dict__:
            self.__dict__[name] = method(self)
        return self.__dict__[name]

    def put(self: Any, value: torch.Tensor) -> None:
        self.__dict__[name] = value

    return property(get, put, doc=method.__doc__)


@dataclass(frozen=True, eq=False)
class Drafts:
    """Every source's draft nodes for B rows, n slots each.

    Attributes:
        tokens: (B, n) long, each node's drafted token (a token id in the vocabulary even where
            not `valid`: it may be fed as padding).
        parents: (n,) long for a tree whose shape is fixed, else (B, n): each node's parent slot
            (smaller than its own), -1 for a child of the current token.
        valid: (B, n) bool, whether the row drafted the node (a node's parent is valid too).
        source: (n,) long, the index of the source that filled each slot (never decreasing: each
            source's slots follow the one before's).
        evidence: (B, S) long, the grade each source gave each row's proposal (prompt lookup: the
            length of the suffix it matched; 0: ungraded), which adaptive decoding learns apart.
        trie: whether the nodes already form a trie (one source, no two siblings alike): nothing to merge.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    valid: torch.Tensor
    source: torch.Tensor
    evidence: torch.Tensor
    trie: bool = False

    @property
    def width(self) -> int:
        """n, the node slots of each row."""
        return self.tokens.shape[1]

    @classmethod
    def of(cls, tokens: torch.Tensor, parents: torch.Tensor, valid: torch.Tensor, evidence: torch.Tensor | None = None,
           trie: bool = True) -> "Drafts":
        """One source's drafts: (B, n) tokens and valid, (n,) or (B, n) parents, (B,) evidence (default 0)."""
        evidence = torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device) if evidence is None else evidence
        return cls(tokens, parents, valid, torch.zeros(tokens.shape[1], dtype=torch.long, device=tokens.device),
                   evidence[:, None], trie)

    @classmethod
    def cat(cls, parts: Sequence["Drafts"]) -> "Drafts":
        """The sources' drafts side by side, in order (each part's parents shifted by the slots before it)."""
        if len(parts) == 1:
            return parts[0]
        offsets, total = [], 0
        for part in parts:
            offsets.append(total)
            total += part.width
        static = all(p.parents.dim() == 1 for p in parts)
        rows = parts[0].tokens.shape[0]
        parents = [torch.where(p.parents < 0, p.parents, p.parents + o) if static else
                   torch.where(p.parents < 0, p.parents, p.parents + o).expand(rows, p.width) for p, o in zip(parts, offsets)]
        return cls(torch.cat([p.tokens for p in parts], dim=1), torch.cat(parents, dim=-1), torch.cat([p.valid for p in parts], dim=1),
                   torch.cat([p.source + i for i, p in enumerate(parts)]), torch.cat([p.evidence for p in parts], dim=1))


def ancestor_table(parents: torch.Tensor, depth: int) -> torch.Tensor:
    """(B, n, depth) long: column k holds each node's k-th ancestor (k = 0: itself), n past the root.

    Pointer doubling: with the first m ancestors of every node and a pointer to its m-th, the next
    m are the first m of that m-th ancestor's; log2(depth) rounds of two gathers.

    Args:
        parents: (B, n) long (-1: the root).
    """
    rows, n = parents.shape
    none = torch.full((rows, 1), n, dtype=torch.long, device=parents.device)
    jump = torch.cat([torch.where(parents < 0, n, parents), none], dim=1)  # (B, n + 1): "past the root" is its own parent
    table = torch.arange(n + 1, device=parents.device).expand(rows, n + 1)[..., None]  # (B, n + 1, 1)
    while table.shape[-1] < depth:
        m = table.shape[-1]
        table = torch.cat([table, table.gather(1, jump[..., None].expand(rows, n + 1, m))], dim=-1)
        jump = jump.gather(1, jump)
    return table[:, :n, :depth]


def ancestor_mask(table: torch.Tensor) -> torch.Tensor:
    """(B, n, n) bool from an `ancestor_table`: [b, i, j] = node j is node i or one of its ancestors."""
    rows, n, _ = table.shape
    return torch.zeros(rows, n, n + 1, dtype=torch.bool, device=table.device).scatter_(2, table, True)[..., :n]


@dataclass(frozen=True, eq=False)
class Merged:
    """Every source's drafts merged into one trie per row (the slots stay where they were).

    Attributes:
        drafts: the drafts as proposed.
        table: (B, n, D) long, each proposed node's `ancestor_table` (before merging).
        kept: (B, n) bool, the valid nodes that stayed (the first of each token path).
        canonical: (B, n) long, the slot each valid node was merged into (its own if kept).
        depth: (B, n) long, 1 for a child of the current token.
        up: (B, n, D) long, the canonical slot of each node's ancestors (column k: the k-th; n past
            the root): the merged trie's tree, from which `compact` builds the fed nodes' mask.
        code: (B, n) long, each proposed node's `path_code` (valid nodes spell the same path where
            their codes are equal); None for a trie.
    """

    drafts: Drafts
    table: torch.Tensor
    kept: torch.Tensor
    canonical: torch.Tensor
    depth: torch.Tensor
    up: torch.Tensor
    code: torch.Tensor | None = None

    def select(self, keep: torch.Tensor) -> "Merged":
        """The rows `keep` only."""
        d = self.drafts
        drafts = Drafts(d.tokens.index_select(0, keep), d.parents if d.parents.dim() == 1 else d.parents.index_select(0, keep),
                        d.valid.index_select(0, keep), d.source, d.evidence.index_select(0, keep), d.trie)
        return Merged(drafts, *(None if getattr(self, f) is None else getattr(self, f).index_select(0, keep)
                                for f in ("table", "kept", "canonical", "depth", "up", "code")))

    @cached
    def ancestors(self) -> torch.Tensor:
        """(B, n, n) bool, the merged trie's tree mask (a node and its ancestors; `ancestor_mask` of `up`), for inspection."""
        return ancestor_mask(self.up)

    @cached
    def spelled(self) -> torch.Tensor:
        """(B, n, D) long, each proposed node's tokens from itself up to the root (`spell`)."""
        return spell(self.drafts, self.table)


def spell(drafts: Drafts, table: torch.Tensor) -> torch.Tensor:
    """(B, n, D) long, each node's tokens from itself up to the root (-1 where invalid, -2 past the root):
    two valid nodes spell the same path exactly when their rows are equal."""
    ext = torch.cat([torch.where(drafts.valid, drafts.tokens, -1), table.new_full((table.shape[0], 1), -2)], dim=1)
    return ext.gather(1, table.flatten(1)).view(table.shape)


def merge(drafts: Drafts, table: torch.Tensor) -> Merged:
    """Merge every row's draft nodes into one trie: nodes spelling the same path are one.

    Args:
        drafts: (B, n) nodes, each source's in topological order (a parent before its children).
        table: (B, n, D) their `ancestor_table` (D: at least the deepest node's depth).
    """
    rows, n, _ = table.shape
    slots = torch.arange(n, device=table.device)
    depth = (table < n).sum(-1)
    if drafts.trie or n == 0:  # one source's trie (or nothing): every valid node stays
        return Merged(drafts, table, drafts.valid, slots.expand(rows, n), depth, table)
    spelled = spell(drafts, table)
    code = path_code(spelled)  # (B, n)
    first = first_in_run(*runs(code), drafts.valid)  # the first valid node of each path (of each code: checked below)
    first = torch.where(drafts.valid, first, n).clamp(max=n - 1)
    exact = (spelled.gather(1, first[..., None].expand_as(spelled)) == spelled).all(-1)
    canonical = torch.where(drafts.valid & exact, first, slots)
    canon = torch.cat([canonical, canonical.new_full((rows, 1), n)], dim=1)
    up = canon.gather(1, table.flatten(1)).view(table.shape)  # each ancestor's canonical slot
    return Merged(drafts, table, drafts.valid & (canonical == slots), canonical, depth, up, code)


@dataclass(frozen=True, eq=False)
class Fed:
    """The draft nodes a step feeds, first in each row (node order), padded to the pass's width.

    A padding position holds some node the row did not feed: it is computed, but no fed node sees
    it and it is never accepted.

    Attributes:
        merged: the merged proposals the nodes come from.
        node: (B, w) long, the merged slot at each position.
        valid: (B, w) bool, False for padding (a row feeding fewer nodes than the widest).
        tokens: (B, w) long, the tokens at each position.
        ancestors: (B, w, w) bool, the tree mask among the fed nodes.
        depth: (B, w) long, 1 for a child of the current token.
    """

    merged: Merged
    node: torch.Tensor
    valid: torch.Tensor
    tokens: torch.Tensor
    ancestors: torch.Tensor
    depth: torch.Tensor

    @property
    def width(self) -> int:
        return self.node.shape[1]

    @cached
    def slot(self) -> torch.Tensor:
        """(B, n) long, the position at which every valid proposed node was fed (a merged-away node:
        its canonical node's), -1 where it was not."""
        rows, n = self.merged.kept.shape
        at = torch.full((rows, n + 1), -1, dtype=torch.long, device=self.node.device)
        at.scatter_(1, torch.where(self.valid, self.node, n), torch.arange(self.width, device=self.node.device).expand_as(self.node))
        return torch.where(self.merged.drafts.valid, at.gather(1, self.merged.canonical), -1)


def compact(merged: Merged, feed: torch.Tensor, width: int) -> Fed:
    """The nodes `feed` chooses, moved to the front of each row, `width` positions per row.

    Args:
        feed: (B, n) bool, an ancestor-closed subset of ``merged.kept``, at most `width` per row.
        width: the most nodes any row feeds (read by the host: the pass's shape).
    """
    rows, n = feed.shape
    order = torch.argsort(feed.to(torch.int8), dim=1, descending=True, stable=True)[:, :width]  # (B, w): fed first, in node order
    at = torch.full((rows, n + 1), width, dtype=torch.long, device=feed.device)  # each slot's position (width: not fed)
    at.scatter_(1, order, torch.arange(width, device=feed.device).expand(rows, width))
    up = merged.up.gather(1, order[..., None].expand(rows, width, merged.up.shape[-1]))  # (B, w, D) ancestors' slots
    anc = ancestor_mask(at.gather(1, up.flatten(1)).view(up.shape))  # (B, w, w), built from the fed nodes alone
    return Fed(merged, order, feed.gather(1, order), merged.drafts.tokens.gather(1, order), anc, merged.depth.gather(1, order))
