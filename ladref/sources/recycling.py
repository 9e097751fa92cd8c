"""Token Recycling (Luo et al., ACL 2025): drafts from the model's own discarded top-k predictions.

Every forward pass predicts a distribution at every token it is fed, and decoding keeps only one
token of it. Token Recycling keeps the top-k: an adjacency matrix (V, k) holds, for each token,
the k most likely next tokens the model predicted the last time that token was fed. A draft tree
is grown from the current token by a static template (`TreeTemplate`): the node at rank path
(r_1, .., r_d) takes the r_d-th successor of its parent's token. After each step the rows of
every fed token are refreshed from that step's logits.

By default the matrix starts empty for every call (cold start); a `RecyclingProposer` with
``warm=True`` keeps it across calls, as the paper does.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..config import check_int
from ..facts import ModelFacts
from ..proposer import DraftSource, StepOutcome
from ..tree import DraftTree


@dataclass(frozen=True)
class TreeTemplate:
    """A static draft-tree shape: one rank path per node, e.g. (0,), (1,), (0, 0), (0, 1), ...

    (r_1, .., r_d) is the node reached by taking the r_1-th successor of the current token, then
    the r_2-th successor of that token, and so on. Every prefix of a path must be a path too.

    Attributes:
        paths: the rank paths, each node after its parent.
    """

    paths: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        paths = tuple(tuple(p) for p in self.paths)
        object.__setattr__(self, "paths", paths)
        seen: set[tuple[int, ...]] = set()
        for path in paths:
            if not path or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in path):
                raise ValueError(f"a template path is a non-empty tuple of ranks (ints >= 0), got {path!r}")
            if len(path) > 1 and path[:-1] not in seen:
                raise ValueError(f"template path {path} comes before (or without) its parent {path[:-1]}")
            if path in seen:
                raise ValueError(f"template path {path} appears twice")
            seen.add(path)

    @classmethod
    def best_first(cls, size: int = 80, topk: int = 8, depth: int = 6, beta: float = 0.55, gamma: float = 0.6) -> "TreeTemplate":
        """The `size` most promising paths, assuming a rank-r successor is right with probability
        beta * gamma**r at any depth, independently (ladref's own rule; the paper tunes its tree).

        Args:
            size: nodes in the tree.
            topk: k, ranks available (the adjacency matrix's width).
            depth: deepest path.
            beta: the assumed acceptance of a rank-0 successor, in (0, 1).
            gamma: the factor each further rank multiplies it by, in (0, 1).
        """
        for name, value, low in (("size", size, 1), ("topk", topk, 1), ("depth", depth, 1)):
            check_int(name, value, low)
        if not (0 < beta < 1 and 0 < gamma < 1):
            raise ValueError(f"beta and gamma must lie in (0, 1), got {beta}, {gamma}")
        frontier = [(-beta * gamma**r, (r,)) for r in range(topk)]
        heapq.heapify(frontier)
        paths: list[tuple[int, ...]] = []
        while frontier and len(paths) < size:
            score, path = heapq.heappop(frontier)
            paths.append(path)
            if len(path) < depth:
                for r in range(topk):
                    heapq.heappush(frontier, (score * beta * gamma**r, path + (r,)))
        paths.sort(key=len)  # parents first
        return cls(tuple(paths))

    @property
    def topk(self) -> int:
        """The widest rank used, plus one: the adjacency width the template needs."""
        return max(max(p) for p in self.paths) + 1

    @property
    def depth(self) -> int:
        return max(len(p) for p in self.paths)


def check_template(vocab_size: int, template: TreeTemplate | None, topk: int | None) -> tuple[TreeTemplate, int]:
    """Token Recycling's settings (`RecyclingProposer`, and its batch form), defaults filled in.

    Returns:
        (the template, `TreeTemplate.best_first()` for None; k, the template's own for None).

    Raises:
        TypeError, ValueError: a vocabulary or k that is not an int >= 1, a template that is not a
            `TreeTemplate`, or k below the ranks the template uses.
    """
    check_int("vocab_size", vocab_size, 1)
    template = TreeTemplate.best_first() if template is None else template
    if not isinstance(template, TreeTemplate):
        raise TypeError(f"template must be a TreeTemplate, got {type(template).__name__}")
    topk = template.topk if topk is None else topk
    check_int("topk", topk, 1)
    if topk < template.topk:
        raise ValueError(f"the template uses rank {template.topk - 1}, which needs topk >= {template.topk}, got {topk}")
    return template, topk


class RecyclingProposer(DraftSource):
    """Token Recycling's draft source: an adjacency matrix of recent top-k successors and a template.

    Args:
        vocab_size: V, rows of the adjacency matrix.
        template: the static tree shape; default `TreeTemplate.best_first()` (80 nodes, depth 6).
        topk: k, successors kept per token; default the template's width.
        warm: keep the matrix across calls (the paper's warm start); False starts each call empty.

    Attributes:
        adjacency: (V, k) long, -1 where nothing was seen yet.
    """

    name = "recycling"

    def __init__(self, vocab_size: int, template: TreeTemplate | None = None, topk: int | None = None, warm: bool = False) -> None:
        template, topk = check_template(vocab_size, template, topk)
        if not isinstance(warm, bool):
            raise TypeError(f"warm must be a bool, got {type(warm).__name__}")
        self.template, self.topk, self.warm = template, topk, warm
        self.adjacency = torch.full((vocab_size, topk), -1, dtype=torch.long)
        index = {p: i for i, p in enumerate(template.paths)}
        self._parents = [index[p[:-1]] if len(p) > 1 else -1 for p in template.paths]  # Python lists: a step's walk is host work
        self._ranks = [p[-1] for p in template.paths]
        self._levels = [[i for i, p in enumerate(template.paths) if len(p) == d] for d in range(1, template.depth + 1)]

    @classmethod
    def for_model(cls, model: torch.nn.Module, **options) -> "RecyclingProposer":
        """A proposer sized for `model`'s vocabulary (keep it and pass ``warm=True`` for warm starts)."""
        return cls(ModelFacts.of(model).vocab_size, **options)

    def begin(self, prompt: Sequence[int]) -> None:
        if not self.warm:
            self.adjacency.fill_(-1)

    def propose(self, context: Sequence[int]) -> DraftTree:
        """Grow the template from the current token; nodes whose token is unknown are dropped."""
        tokens, current = [-1] * len(self._parents), int(context[-1])
        for level in self._levels:  # depth by depth: a node takes its rank among its parent's successors
            nodes = [i for i in level if self._parents[i] < 0 or tokens[self._parents[i]] >= 0]  # an unknown parent: unknown
            if not nodes:
                break
            rows = self.adjacency[[current if self._parents[i] < 0 else tokens[self._parents[i]] for i in nodes]].tolist()
            for i, row in zip(nodes, rows):
                tokens[i] = row[self._ranks[i]]
        new, kept, parents = {}, [], []
        for i, token in enumerate(tokens):  # parents come before their children
            if token >= 0:
                new[i] = len(kept)
                kept.append(token)
                parents.append(new[self._parents[i]] if self._parents[i] >= 0 else -1)
        return DraftTree(torch.tensor(kept, dtype=torch.long), torch.tensor(parents, dtype=torch.long), (self.name,) * len(kept))

    def learn(self, outcome: StepOutcome) -> None:
        """Each fed token's row becomes the top-k the model just predicted after it (the last one wins)."""
        if outcome.top is None:
            return
        ids, top = outcome.input_ids.tolist(), outcome.top[:, : self.topk]
        last = {token: row for row, token in enumerate(ids)}
        rows = torch.tensor(list(last.values()))
        self.adjacency[torch.tensor(list(last.keys()))] = top[rows]
