"""The oracle's acceptance, learned (`ladref.batched.acceptance` is its tensor twin): how often each kind of draft node turns out right, from every step, fed or not.

The half of the oracle policy (``oracle_policy.DraftPolicy``) that knows what a draft is worth (the other half
prices what a step costs). Acceptance rates are kept per draft source, grade of evidence (prompt
lookup: the length of the suffix it matched), depth and sibling rank: how often a node whose
parent was right turned out right too. Greedy output is fixed, so once the next tokens are known
any proposed tree can be checked against them, a counterfactual verification that costs no
forward pass: every step's proposals are `propose`d, and `observe` walks them down the tokens
that came. A node's value, the probability that it will be accepted, is the product of the
rates along its path (`values`; siblings from different sources scaled by `exclusive`).

The probes (each step's best draft-only choice, `watch`ed fed or not) keep `trust`: the draft
tokens they matched per draft token they expected, the correction for choosing nodes because
their estimates are high. The window's value is what its source's drafts won BEYOND the other
sources' drafts of the same step (how much deeper its tree matched the coming tokens than the
best of theirs): the tokens a step would lose without the window, not the tokens the pool's
drafts matched, most of which another source drafts too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ladref.tree import DraftTree

Key = tuple[str, int, int, int]  # (source, evidence, depth, sibling rank)


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


def exclusive(tree: DraftTree, value: torch.Tensor) -> torch.Tensor:
    """Values made consistent: at most one child of a node can be accepted, so its children's
    values sum to at most its own (the root's: 1). Sources that each think well of a different
    child overstate the sum; their siblings, and with them their subtrees, are scaled down to it."""
    parents, values = tree.parents.tolist(), value.tolist()
    below = [values[i] / (1.0 if p < 0 else max(values[p], 1e-300)) for i, p in enumerate(parents)]
    for children in tree.children.values():  # below[i]: P(node i right | its parent right)
        total = sum(below[c] for c in children)
        for c in children:
            below[c] /= max(total, 1.0)
    out: list[float] = []
    for i, p in enumerate(parents):  # topological order: a parent comes first
        out.append(below[i] * (1.0 if p < 0 else out[p]))
    return torch.tensor(out, dtype=value.dtype)


@dataclass
class Pending:
    """A proposed tree still being checked against the tokens that follow its position."""

    tree: DraftTree
    keys: list[Key] | None  # None: a probe, counted in `DraftPolicy.probes` instead of the rates
    node: int = -1  # the deepest node matched so far (-1: the root)
    expected: float = 0.0  # a probe's expected accepted draft tokens
    matched: int = 0  # draft tokens matched so far
    group: int = -1  # the step whose proposals it is one of (-1: a probe)


@dataclass
class ProbeTally:
    """Draft tokens the judged probes expected and matched, each count starting from a prior of 2."""

    expected: float = 2.0
    matched: float = 2.0


class Acceptance:
    """What `DraftPolicy` learns of acceptance: its rates, pending trees, probes and window value.

    A mixin of `ladref.pricing.policy.DraftPolicy`, whose dataclass fields these are (declared there,
    so that a policy is one object to copy and print).

    Attributes:
        settings: the prior of every rate and the window's source (`ladref.pricing.policy.PolicySettings`).
        rates: the learned acceptance rate of every (source, evidence, depth, sibling rank).
        pending: the proposed trees and probes still being checked against the coming tokens.
        window_value: the tokens per step the window's source recently won beyond the other sources.
        probes: what the probes expected and matched (`trust`).
        groups: per step still being checked, [the window source's tree's matched depth, the best
            other tree's, the trees still alive].
        proposals: the steps proposed so far (each step's trees form one group).
    """

    settings: Any  # a `ladref.pricing.policy.PolicySettings`: its `prior` and `window_source`
    rates: dict[Key, Rate]
    pending: list[Pending]
    window_value: float
    probes: ProbeTally
    groups: dict[int, list[int]]
    proposals: int

    def rate(self, key: Key) -> float:
        found, (a, b) = self.rates.get(key), self.settings.prior
        return found.mean if found is not None else a / b

    def keys(self, tree: DraftTree, evidence: int = 0) -> list[Key]:
        """Each node's rate key (`tree` is one source's tree: ranks are among its own siblings)."""
        ranks, depths = sibling_ranks(tree), tree.depths.tolist()
        return [(tree.sources[i], evidence, depths[i], ranks[i]) for i in range(len(tree))]

    def values(self, tree: DraftTree, evidence: int = 0) -> torch.Tensor:
        """(n,) float64, each node's probability of acceptance: the rates' product along its path."""
        value: list[float] = []
        for parent, key in zip(tree.parents.tolist(), self.keys(tree, evidence)):
            value.append(self.rate(key) * (1.0 if parent < 0 else value[parent]))
        return torch.tensor(value, dtype=torch.float64)

    def propose(self, trees: Sequence[DraftTree], evidence: Sequence[int] | None = None) -> None:
        """Remember each source's tree for this position, to check it against the coming tokens.

        `evidence`: per tree, what its source says of the draft's strength (prompt lookup: the
        length of the suffix it matched); rates are learned apart for each value.
        """
        group, self.proposals = self.proposals, self.proposals + 1
        for tree, seen in zip(trees, [0] * len(trees) if evidence is None else evidence):
            if len(tree):
                self.pending.append(Pending(tree, self.keys(tree, seen), group=group))
                self.groups.setdefault(group, [0, 0, 0])[2] += 1

    def watch(self, probe: DraftTree | None, expected: float) -> None:
        """Check a probe, `Choice.probe`, against the coming tokens like a proposed tree, fed or
        not: what it matches against the `expected` draft tokens moves `trust` (None: nothing)."""
        if probe is not None:
            self.pending.append(Pending(probe, None, expected=expected))

    def observe(self, tokens: Sequence[int]) -> None:
        """The next tokens of the text are known: every pending tree learns how far it was right,
        and the window's value moves toward what its source won beyond the others in the steps
        whose trees are all done matching now."""
        still, won = [], 0
        for item in self.pending:
            if self._follow(item, tokens):
                still.append(item)
            elif item.keys is None:
                self.probes.expected += item.expected
                self.probes.matched += item.matched
            else:
                won += self._settle(item)
        self.pending = still
        self.window_value = 0.9 * self.window_value + 0.1 * won

    def _settle(self, item: Pending) -> int:
        """A proposed tree is done matching; once its step's trees all are, the tokens the window's
        source matched beyond the best other source's tree (else 0)."""
        group = self.groups[item.group]
        side = 0 if item.keys[0][0] == self.settings.window_source else 1
        group[side] = max(group[side], item.matched)
        group[2] -= 1
        if group[2]:
            return 0
        del self.groups[item.group]
        return max(0, group[0] - group[1])

    def _follow(self, item: Pending, tokens: Sequence[int]) -> bool:
        """Walk `item` down `tokens`, counting every reached node's rate (a probe's: none).

        Returns:
            whether it can still match the tokens after these.
        """
        for token in tokens:
            children = item.tree.children.get(item.node, [])
            for child in children if item.keys is not None else ():  # every child was reached; one was right
                self._count(item.keys[child], int(item.tree.tokens[child]) == int(token))
            item.node = next((c for c in children if int(item.tree.tokens[c]) == int(token)), None)
            item.matched += item.node is not None
            if item.node is None or not item.tree.children.get(item.node):
                return False
        return True

    @property
    def trust(self) -> float:
        """Draft tokens matched per draft token expected, over every watched probe (0.2..1.5).

        Rates averaged over contexts, and nodes chosen because their estimates are high, overrate
        what is chosen; the choice's expected value is scaled by what the probes found."""
        return min(1.5, max(0.2, self.probes.matched / self.probes.expected))

    def _count(self, key: Key, accepted: bool) -> None:
        rate = self.rates.setdefault(key, Rate(*self.settings.prior))
        rate.accepted += float(accepted)
        rate.reached += 1.0
