"""What a step should feed: expected accepted tokens against the measured cost of the step.

A draft pays only if what it adds to the expected tokens of a step beats what it adds to the
step's time. `DraftPolicy` keeps both sides:

* acceptance: for every draft source, depth and sibling rank, how often a draft node whose
  parent was right turned out right too. It learns this from EVERY step, fed or not: greedy
  output is fixed, so once the next tokens are known, any proposed tree can be checked against
  them (a counterfactual verification that costs no forward pass). A node's value is the
  product of those rates along its path: the probability that it will be accepted;
* cost: t(q) at the current KV length, from a `ladref.cost.CostModel` measured on this machine.

Each step it feeds the b most valuable nodes (a tree: a child is never worth more than its
parent) and, optionally, the lookahead window, choosing b and the window to maximise

    (1 + sum of the fed nodes' values + window value) / t(q),    q = 1 + window cells + b,

expected tokens per second. On a flat (launch-bound GPU) curve every node adds value at no cost,
so it feeds everything; on a CPU curve whose step cost doubles from q = 1 to q = 2 it drafts only
when about one more token is expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .cost import CostModel
from .tree import DraftTree

Key = tuple[str, int, int]  # (source, depth, sibling rank)


@dataclass
class Rate:
    """Beta-posterior count of one acceptance rate: accepted of reached, plus the prior."""

    accepted: float
    reached: float

    @property
    def mean(self) -> float:
        return self.accepted / self.reached


def sibling_ranks(tree: DraftTree) -> list[int]:
    """Each node's index among its parent's children."""
    ranks = [0] * len(tree)
    for children in tree.children.values():
        for rank, node in enumerate(children):
            ranks[node] = rank
    return ranks


@dataclass
class Pending:
    """A proposed tree still being checked against the tokens that follow its position."""

    tree: DraftTree
    keys: list[Key]
    node: int = -1  # the deepest node matched so far (-1: the root)


@dataclass
class DraftPolicy:
    """Chooses each step's drafts and window from learned acceptance and measured cost.

    Args:
        cost: t(q, kv) of this machine (`ladref.cost.CostModel`).
        widths: the step widths a compiled runner can take without recompiling (a step is padded
            to the next one); None: any width up to the cost model's largest.
        prior: (accepted, reached) pseudo-counts of every rate before any evidence (mean a/b).
        window_bonus: the floor of the window's value in tokens per step (> 0: fed when free).
        window_source: the source whose drafts the window keeps fresh (the lookahead pool); the
            window's value is the tokens per step that source's drafts would recently have won.
    """

    cost: CostModel
    widths: Sequence[int] | None = None
    prior: tuple[float, float] = (1.0, 3.0)
    window_bonus: float = 0.05
    window_source: str = "lookahead"
    rates: dict[Key, Rate] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    window_value: float = 0.0

    def __post_init__(self) -> None:
        a, b = self.prior
        if not 0 < a < b:
            raise ValueError(f"prior must be (accepted, reached) with 0 < accepted < reached, got {self.prior}")
        if self.widths is not None:
            self.widths = tuple(sorted(int(w) for w in self.widths))
            if not self.widths or self.widths[0] < 1:
                raise ValueError(f"widths must be positive ints, got {self.widths}")

    # --- acceptance ---------------------------------------------------------------------------

    def rate(self, key: Key) -> float:
        found = self.rates.get(key)
        return found.mean if found is not None else self.prior[0] / self.prior[1]

    def values(self, tree: DraftTree) -> torch.Tensor:
        """(n,) float64, each node's probability of acceptance: the rates' product along its path
        (`tree` is one source's tree: ranks are among its own siblings)."""
        ranks, value = sibling_ranks(tree), torch.zeros(len(tree), dtype=torch.float64)
        for node, (parent, depth) in enumerate(zip(tree.parents.tolist(), tree.depths.tolist())):
            own = self.rate((tree.sources[node], depth, ranks[node]))
            value[node] = own * (1.0 if parent < 0 else float(value[parent]))
        return value

    def propose(self, trees: Sequence[DraftTree]) -> None:
        """Remember each source's tree for this position, to check it against the coming tokens."""
        for tree in trees:
            if len(tree):
                ranks = sibling_ranks(tree)
                keys = [(tree.sources[i], int(tree.depths[i]), ranks[i]) for i in range(len(tree))]
                self.pending.append(Pending(tree, keys))

    def observe(self, tokens: Sequence[int]) -> None:
        """The next tokens of the text are known: every pending tree learns how far it was right."""
        still, won = [], 0
        for item in self.pending:
            alive = True
            for token in tokens:
                children = item.tree.children.get(item.node, [])
                for child in children:  # every child was reached; the one spelling `token` was accepted
                    right = int(item.tree.tokens[child]) == int(token)
                    self._count(item.keys[child], right)
                    won += right and item.keys[child][0] == self.window_source
                item.node = next((c for c in children if int(item.tree.tokens[c]) == int(token)), None)
                if item.node is None or not item.tree.children.get(item.node):
                    alive = False
                    break
            if alive:
                still.append(item)
        self.pending = still
        self.window_value = 0.9 * self.window_value + 0.1 * won

    def _count(self, key: Key, accepted: bool) -> None:
        rate = self.rates.setdefault(key, Rate(*self.prior))
        rate.accepted += float(accepted)
        rate.reached += 1.0

    # --- cost ---------------------------------------------------------------------------------

    def step_time(self, q: int, kv: int) -> float:
        """t of a step of q tokens: padded to the next compiled width when widths are set."""
        if self.widths is not None:
            q = next((w for w in self.widths if w >= q), self.widths[-1])
        return self.cost.time(q, kv)

    def max_width(self) -> int:
        return self.widths[-1] if self.widths is not None else self.cost.max_width

    def choose(self, trees: Sequence[DraftTree], kv: int, window_cells: int | None = None) -> tuple[DraftTree, bool, float]:
        """The drafts and window worth feeding this step.

        Args:
            trees: each source's proposed tree (merged here; a node both propose takes the higher value).
            kv: the KV length the step attends to.
            window_cells: the lookahead window's tokens besides the current one, or None (no window).

        Returns:
            (the nodes to feed, feed the window?, expected tokens per second).
        """
        tree, value = DraftTree.empty(), torch.zeros(0, dtype=torch.float64)
        for own in trees:
            tree = tree.merge(own) if len(tree) else own
            value = torch.cat([value, torch.zeros(len(tree) - len(value), dtype=torch.float64)])
            for node, v in enumerate(self.values(own).tolist()):
                at = tree.find_path(own.path_tokens(node))[-1]
                value[at] = max(float(value[at]), v)
        order = sorted(range(len(tree)), key=lambda i: (-float(value[i]), int(tree.depths[i]), i))  # parents first
        gain = [0.0] + value[order].cumsum(0).tolist()
        best = (-1.0, 0, False)
        for window in ([False, True] if window_cells is not None else [False]):
            base = 1 + (window_cells if window else 0)
            bonus = max(self.window_value, self.window_bonus) if window else 0.0
            for b in range(0, min(len(tree), self.max_width() - base) + 1):
                rate = (1.0 + gain[b] + bonus) / self.step_time(base + b, kv)
                if rate >= best[0]:  # ties go to the wider step: more evidence for the same time
                    best = (rate, b, window)
        rate, b, window = best
        return tree.select(order[:b]), window, rate
