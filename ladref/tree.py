"""Draft trees: the token paths a step verifies, merged into a trie rooted at the current token.

Every draft source (the n-gram pool, prompt lookup, Jacobi's guess, Token Recycling) proposes
token paths that would continue the current token. A `DraftTree` holds them as a trie: paths
that share a prefix share its nodes, so the prefix is fed and verified once.

Nodes are stored in topological order (a node's parent comes before it), one entry per node:

    tokens  (n,)  the drafted token of each node
    parents (n,)  the index of each node's parent, -1 for a child of the root (the current token)
    sources       the name of the draft source that proposed each node

A node at depth d (a child of the root has depth 1) is fed at position p + d, p being the
current token's position, and sees the current token and its own ancestors only
(`DraftTree.ancestors`): each root-to-node path is one ordinary causal sequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A trie of draft tokens rooted at the current token.

    Attributes:
        tokens: (n,) long, the token of each node.
        parents: (n,) long, each node's parent index (< its own index), -1 for the root's children.
        sources: n names, the draft source of each node (e.g. "lookahead", "prompt_lookup").
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    sources: tuple[str, ...]

    def __post_init__(self) -> None:
        n = self.tokens.shape[0] if self.tokens.dim() == 1 else -1
        if n < 0 or self.parents.shape != (n,) or len(self.sources) != n:
            raise ValueError(f"a DraftTree needs (n,) tokens, (n,) parents and n sources; got {tuple(self.tokens.shape)}, "
                             f"{tuple(self.parents.shape)} and {len(self.sources)}")
        if self.tokens.is_floating_point() or self.parents.is_floating_point():
            raise TypeError("DraftTree tokens and parents must be integer tensors")
        if n and not all(-1 <= parent < node for node, parent in enumerate(self._lists[1])):
            raise ValueError("every parent index must be -1 (the root) or an earlier node's index")

    # --- building -----------------------------------------------------------------------------

    @classmethod
    def empty(cls) -> "DraftTree":
        """No drafts: the step verifies nothing and accepts one greedy token."""
        return cls(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), ())

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[int]], source: str) -> "DraftTree":
        """The trie of token paths continuing the current token (in order; repeated prefixes merged).

        Args:
            paths: token sequences, each a draft of the tokens after the current one.
            source: the draft source's name, recorded on every node.
        """
        return cls.empty().extend(paths, source)

    @classmethod
    def chains(cls, paths: Iterable[Sequence[int]], source: str) -> "DraftTree":
        """Each path as its own chain, nothing shared: the flat "G candidate rows" layout of the paper."""
        tokens, parents = [], []
        for path in paths:
            for depth, token in enumerate(path):
                parents.append(-1 if depth == 0 else len(tokens) - 1)
                tokens.append(int(token))
        return cls(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long), (source,) * len(tokens))

    def extend(self, paths: Iterable[Sequence[int]], source: str) -> "DraftTree":
        """This tree with `paths` inserted: a prefix already present is reused, the rest appended."""
        tokens, parents, sources = self.tokens.tolist(), self.parents.tolist(), list(self.sources)
        child = {(parent, token): node for node, (parent, token) in enumerate(zip(parents, tokens))}
        for path in paths:
            node = -1
            for token in path:
                key = (node, int(token))
                if key not in child:
                    child[key] = len(tokens)
                    tokens.append(int(token))
                    parents.append(node)
                    sources.append(source)
                node = child[key]
        return DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long), tuple(sources))

    def merge(self, other: "DraftTree") -> "DraftTree":
        """The union of two tries; a node both propose keeps this tree's source."""
        merged = self
        for source in dict.fromkeys(other.sources):
            leaves = [other.path_tokens(i) for i in range(len(other)) if other.sources[i] == source]
            merged = merged.extend(leaves, source)
        return merged

    def select(self, nodes: Iterable[int]) -> "DraftTree":
        """The subtree of the given nodes, which must include every selected node's parent."""
        keep = sorted(set(int(i) for i in nodes))
        new = {old: new for new, old in enumerate(keep)}
        parents, old_parents = [], self._lists[1]
        for old in keep:
            parent = old_parents[old]
            if parent != -1 and parent not in new:
                raise ValueError(f"node {old} is selected without its parent {parent}")
            parents.append(new.get(parent, -1))
        index = torch.tensor(keep, dtype=torch.long)
        return DraftTree(self.tokens[index], torch.tensor(parents, dtype=torch.long), tuple(self.sources[i] for i in keep))

    def prune(self, budget: int) -> "DraftTree":
        """The first `budget` nodes (ancestor-closed, since parents come first)."""
        return self if budget >= len(self) else self.select(range(max(budget, 0)))

    def within_depth(self, depth: int) -> "DraftTree":
        """The nodes at depth <= `depth`."""
        return self if not len(self) or int(self.depths.max()) <= depth else self.select(torch.nonzero(self.depths <= depth).flatten().tolist())

    # --- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @cached_property
    def depths(self) -> torch.Tensor:
        """(n,) long, 1 for the root's children."""
        depth: list[int] = []
        for parent in self._lists[1]:
            depth.append(1 if parent < 0 else depth[parent] + 1)
        return torch.tensor(depth, dtype=torch.long)

    @cached_property
    def children(self) -> dict[int, list[int]]:
        """node -> its children in order (-1: the root's children)."""
        kids: dict[int, list[int]] = {}
        for node, parent in enumerate(self._lists[1]):
            kids.setdefault(parent, []).append(node)
        return kids

    @cached_property
    def _lists(self) -> tuple[list[int], list[int]]:
        """(tokens, parents) as Python lists: read node by node, a tensor costs microseconds an element."""
        return self.tokens.tolist(), self.parents.tolist()

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node`."""
        nodes, parents = [], self._lists[1]
        while node >= 0:
            nodes.append(node)
            node = parents[node]
        return nodes[::-1]

    def path_tokens(self, node: int) -> list[int]:
        """The drafted tokens from the root's child down to `node`."""
        tokens = self._lists[0]
        return [tokens[i] for i in self.path(node)]

    def locate(self, other: "DraftTree") -> list[int]:
        """For each node of `other`, the node of this tree spelling the same path (this tree must hold
        every path of `other`, as its `merge` with `other` does; else a ValueError)."""
        at: list[int] = []
        for node, (token, parent) in enumerate(zip(*other._lists)):
            found = self._child(-1 if parent < 0 else at[parent], token)
            if found is None:
                raise ValueError(f"node {node} of the other tree (path {other.path_tokens(node)}) is not in this tree")
            at.append(found)
        return at

    def _child(self, node: int, token: int) -> int | None:
        """The child of `node` (-1: the root) drafting `token`, or None."""
        own = self._lists[0]
        return next((c for c in self.children.get(node, ()) if own[c] == token), None)

    def find_path(self, tokens: Sequence[int]) -> list[int]:
        """The nodes spelling the longest prefix of `tokens` from the root."""
        nodes, node = [], -1
        for token in tokens:
            node = self._child(node, int(token))
            if node is None:
                break
            nodes.append(node)
        return nodes

    def ancestors(self) -> torch.Tensor:
        """(n, n) bool: [i, j] is True when node j is node i or one of its ancestors (the tree mask)."""
        n = len(self)
        seen = torch.eye(n, dtype=torch.bool)
        for node, parent in enumerate(self.parents.tolist()):
            if parent >= 0:
                seen[node] |= seen[parent]
        return seen

    def is_chain(self) -> bool:
        """True when the nodes form one path (node i's parent is node i-1)."""
        return self._lists[1] == list(range(-1, len(self) - 1))
