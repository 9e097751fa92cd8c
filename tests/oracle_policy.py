"""The one-prompt policy, the oracle `ladref.batched.policy.BatchPolicy` is tested against: what a step should feed.

Written once, for one prompt, to be read; the library runs its tensor twin for every batch, B = 1
included. (It was `ladref.pricing.policy.DraftPolicy`.)


A draft pays only if what it adds to a step's expected tokens beats what it adds to its time.
`DraftPolicy` keeps both sides:

* acceptance (`oracle_acceptance`): per draft source, grade of evidence (prompt lookup: the
  length of the suffix it matched), depth and sibling rank, how often a draft node whose parent
  was right turned out right too. It learns this from EVERY step, fed or not: greedy output is
  fixed, so once the next tokens are known any proposed tree can be checked against them (a
  counterfactual verification that costs no forward pass). A node's value, the probability that
  it will be accepted, is the product of those rates along its path (siblings from different
  sources scaled to add up to at most their parent's: only one can be right);
* cost: t(q) at the current KV length, from a `ladref.pricing.cost.CostModel` measured on this machine
  with bare forward passes (a prior), optionally corrected by the time each step of this call
  actually took, its host work included (`timed`: the evidence).

Each step it feeds the b most valuable nodes (a tree: a child is never worth more than its
parent) and, optionally, the lookahead window, choosing b and the window to maximise

    (1 + trust x sum of the fed nodes' values + window value) / t(q),    q = 1 + window cells + b,

expected tokens per second, `trust` being what the probes (each step's best draft-only choice,
watched fed or not) delivered against what they expected. On a flat (launch-bound GPU) curve
every node adds value at no cost, so it feeds everything; on a CPU curve whose step cost
doubles from q = 1 to q = 2 it drafts only when about one more token is expected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ladref.tree import DraftTree
from oracle_acceptance import Acceptance, Key, Pending, ProbeTally, Rate, exclusive

from ladref.pricing.cost import CostModel
from ladref.pricing.policy import PolicySettings


@dataclass(frozen=True)
class Load:
    """The rest of the batch a row's step runs in: what its pass yields and costs without this row.

    Attributes:
        others: the tokens the batch's other rows are expected to yield in the pass (0: alone).
        floor: the width the pass is padded to anyway, the widest step the other rows feed for their
            own sake (1: none wider than a greedy step); up to it, this row's tokens cost nothing.
    """

    others: float = 0.0
    floor: int = 1


@dataclass(frozen=True)
class Choice:
    """What `DraftPolicy.choose` found worth feeding this step.

    Attributes:
        tree: the draft nodes to feed.
        window: whether to feed the lookahead window.
        rate: the step's expected tokens per second.
        probe: the best draft-only step's nodes (no window, at least one node), to be checked
            against the coming tokens whether fed or not (`DraftPolicy.watch`); None: no node fits.
        probe_expected: the draft tokens the probe is expected to get accepted (before trust).
        own_width: the step's width had the pass not been padded anyway (`Load.floor` 1): the width
            this row feeds for its own sake, what the other rows of a batch may count on.
    """

    tree: DraftTree
    window: bool
    rate: float
    probe: DraftTree | None
    probe_expected: float
    own_width: int = 1


@dataclass
class DraftPolicy(Acceptance):
    """Chooses each step's drafts and window from learned acceptance and measured cost.

    Args:
        cost: t(q, kv) of this machine (`ladref.pricing.cost.CostModel`).
        widths: the step widths a compiled runner can take without recompiling (a step is padded
            to the next one); None: any width up to the cost model's largest.
        settings: its priors and running averages (`PolicySettings`).

    Attributes:
        rates: the learned acceptance rate of every (source, evidence, depth, sibling rank).
        pending: the proposed trees and probes still being checked against the coming tokens.
        window_value: the tokens per step the window's source recently won beyond the other sources.
        groups, proposals: the steps whose proposals are still being checked (`Acceptance`).
        corrections: log(measured / modelled) step time per width bucket (0: any bucket).
        probes: what the probes expected and matched (`trust`).
    """

    cost: CostModel
    widths: Sequence[int] | None = None
    settings: PolicySettings = PolicySettings()
    rates: dict[Key, Rate] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    window_value: float = 0.0
    groups: dict[int, list[int]] = field(default_factory=dict)
    proposals: int = 0
    corrections: dict[int, float] = field(default_factory=dict)
    probes: ProbeTally = field(default_factory=ProbeTally)
    _priced: tuple | None = field(default=None, init=False, repr=False, compare=False)  # the last `step_times`

    def __post_init__(self) -> None:
        if self.widths is not None:
            self.widths = tuple(sorted(int(w) for w in self.widths))
            if not self.widths or self.widths[0] < 1:
                raise ValueError(f"widths must be positive ints, got {self.widths}")
            if self.widths[-1] > self.cost.max_width:
                raise ValueError(f"width {self.widths[-1]} is wider than the cost curve measures ({self.cost.max_width}); "
                                 "measure the widths the runner takes")

    # --- cost ---------------------------------------------------------------------------------

    def bucket(self, q: int) -> int:
        """The width a q-token step is priced at: the next compiled width, else the next measured one."""
        widths = self.widths if self.widths is not None else self.cost.widths
        return next((w for w in widths if w >= q), widths[-1])

    def step_times(self, kv: int) -> list[float]:
        """[t(q, kv) for q = 1..`max_width`()] (index q - 1) as the policy prices a step of q tokens:
        padded to the next compiled width when widths are set, times the correction learned from
        timed steps of its bucket (of any bucket until it has one). The curve is read once."""
        key = (kv, self.cost, tuple(self.corrections.items()))
        if self._priced is not None and self._priced[0] == key:  # asked again before the step (`may_draft`, `choose`)
            return self._priced[1]
        curve, default = self.cost.curve(kv, self.widths), self.corrections.get(0, 0.0)  # at the compiled widths only, when set
        widths, j, times = self.widths if self.widths is not None else self.cost.widths, 0, []
        factors = [math.exp(self.corrections.get(w, default)) for w in widths]
        for q in range(1, self.max_width() + 1):
            while j < len(widths) - 1 and widths[j] < q:  # the bucket: the first width >= q, else the widest
                j += 1
            times.append(curve[j if self.widths is not None else q - 1] * factors[j])
        self._priced = (key, times)
        return times

    def step_time(self, q: int, kv: int) -> float:
        """t of a step of q tokens, as `step_times` prices it."""
        return self.step_times(kv)[q - 1]

    def timed(self, q: int, kv: int, seconds: float) -> None:
        """A step of q tokens over kv cached ones took `seconds`, all of it (proposing, choosing,
        the forward pass, verifying): move the corrections of its bucket and of all toward it."""
        if not self.settings.calibrate or not seconds > 0:
            return
        bucket = self.bucket(q)
        modelled = self.cost.time(bucket if self.widths is not None else q, kv)
        error = max(-1.0, min(1.0, math.log(seconds / modelled)))  # one odd step moves little
        for key in (bucket, 0):
            old = self.corrections.get(key)
            self.corrections[key] = error if old is None else old + self.settings.smoothing * (error - old)

    def max_width(self) -> int:
        return self.widths[-1] if self.widths is not None else self.cost.max_width

    def choose(self, trees: Sequence[DraftTree], kv: int, window_cells: int | None = None,
               evidence: Sequence[int] | None = None, load: Load = Load()) -> Choice:
        """The drafts and window worth feeding this step, and its probe (to `watch`: not watched here).

        Args:
            trees: each source's proposed tree (merged here; a node both propose takes the higher value).
            kv: the KV length the step attends to.
            window_cells: the lookahead window's tokens besides the current one, or None (no window).
            evidence: per tree, as in `propose`.
            load: the rest of a batch's pass (`Load`): the step maximises the pass's tokens per second.
        """
        tree, value = self._merged(trees, evidence)
        values, depths = value.tolist(), tree.depths.tolist()
        order = sorted(range(len(tree)), key=lambda i: (-values[i], depths[i], i))  # parents first
        expected, times = [0.0] + value[order].cumsum(0).tolist(), self.step_times(kv)
        (rate, b, window), probe = self._search(expected, times, window_cells, load)
        own = self._search(expected, times, window_cells, Load(load.others))[0] if load.floor > 1 else (rate, b, window)
        return Choice(tree.select(order[:b]), window, rate, tree.select(order[:probe]) if probe else None,
                      expected[probe] if probe else 0.0, 1 + own[1] + (window_cells if own[2] else 0))

    def may_draft(self, kv: int, window_cells: int | None = None, load: Load = Load()) -> bool:
        """Whether any draft, or the window, could pay at this step: `choose` at its most hopeful,
        every node worth a whole token (a node is worth at most 1, so b nodes at most b). False:
        whatever is proposed, the step will be a plain greedy one, so proposing can be skipped."""
        _, b, window = self._search(list(range(self.max_width() + 1)), self.step_times(kv), window_cells, load)[0]
        return b > 0 or window

    def _search(self, expected: list[float], times: list[float], window_cells: int | None,
                load: Load) -> tuple[tuple[float, int, bool], int]:
        """The best (rate, b, window) over every b and window, and the b of the best draft-only step
        (no window, b >= 1; 0: none), `expected[b]` being the b most valuable nodes' summed value
        and `times[q - 1]` a step of q tokens' (`step_times`).
        The rate is the pass's: (the other rows' tokens + this row's) / t(the widest of the pass)."""
        trust = self.trust
        gain = [trust * e for e in expected]
        best, probe = (-1.0, 0, False), (-1.0, 0)
        for window in ([False, True] if window_cells is not None else [False]):
            base = 1 + (window_cells if window else 0)
            bonus = max(self.window_value, self.settings.window_bonus) if window else 0.0
            for b in range(0, min(len(expected) - 1, self.max_width() - base) + 1):
                rate = (load.others + 1.0 + gain[b] + bonus) / times[min(max(base + b, load.floor), len(times)) - 1]
                if rate >= best[0]:  # ties go to the wider step: more evidence for the same time
                    best = (rate, b, window)
                if not window and b and rate > probe[0]:
                    probe = (rate, b)
        return best, probe[1]

    def _merged(self, trees: Sequence[DraftTree], evidence: Sequence[int] | None) -> tuple[DraftTree, torch.Tensor]:
        """The sources' trees merged, each node valued as its most hopeful source values it (`exclusive`)."""
        tree, value = DraftTree.empty(), []
        for own, seen in zip(trees, [0] * len(trees) if evidence is None else evidence):
            tree = tree.merge(own) if len(tree) else own
            value += [0.0] * (len(tree) - len(value))
            for at, v in zip(tree.locate(own), self.values(own, seen).tolist()):
                value[at] = max(value[at], v)
        return tree, exclusive(tree, torch.tensor(value, dtype=torch.float64))
