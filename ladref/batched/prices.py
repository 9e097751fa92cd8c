"""What a batch's step costs as its policy prices it: the surface at B, calibrated, and whether any draft can pay.

`BatchPrices` holds the host's side of `ladref.batched.policy.BatchPolicy`'s pricing:

* `curve`: t(q, kv) of a pass of B rows for q = 1..M, the surface's (`ladref.pricing.surface.CostSurface.at`,
  kept per B), times the correction learned from timed passes (`timed`, as `DraftPolicy.step_times`:
  per width bucket, the overall one for a bucket never timed); `times` is the same on the device;
* `timed`: a run of passes between two reads took so long: the corrections of their buckets, and the
  overall one, move toward log(measured / modelled), as `ladref.pricing.policy.DraftPolicy.timed`'s,
  but a run moves a correction by at most 1 (x smoothing), not to at most 1: a batch's host work
  can make its passes many times dearer than the bare passes measured, and the corrections get there;
* `may_draft`: `DraftPolicy.may_draft` for a batch: whether any b nodes, or the window, could beat a
  plain step were every node worth a whole token, or, given the best rate learned at each depth,
  worth the most those rates allow (`worth`), on the host. t(q, kv) is linear in kv between two
  measured KV lengths, so is each width's margin over a plain step: where a width pays in a segment
  is an interval at one end, and the segment's answer is worked out once (per B, hope and
  corrections), then a comparison a step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Sequence

import torch

from ..pricing.cost import CostModel
from ..pricing.policy import PolicySettings
from ..pricing.surface import CostSurface

Pass = tuple[int, int, int]  # (q, rows, kv) of one timed pass


def on_device(values: Sequence[float], device: torch.device) -> torch.Tensor:
    """(n,) float64 `values` on `device`, copied without waiting for the device (pinned, non-blocking, on CUDA)."""
    host = torch.tensor(values, dtype=torch.float64)
    return host.to(device) if device.type != "cuda" else host.pin_memory().to(device, non_blocking=True)


def paying(margins: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Where some width beats a plain pass along a kv segment (w = 0..1 from its start to its end).

    Args:
        margins: per width q, ``(rows + gain(q)) t(1) - rows t(q)`` at w = 0 and at w = 1 (linear in
            between): q pays where its margin is >= 0 (a tie goes to the wider step). Read in
            order, up to the first width that pays along the whole segment (a generator's later
            widths are never worked out).

    Returns:
        (low, high): some width pays where w <= low or w >= high (low < 0 and high > 1: nowhere).
    """
    low, high = -1.0, 2.0
    for at0, at1 in margins:
        if at0 >= 0 and at1 >= 0:
            return 2.0, -1.0
        if at0 >= 0:  # pays from the segment's start up to where the margin crosses 0
            low = max(low, at0 / (at0 - at1))
        elif at1 >= 0:  # pays from where it crosses 0 to the segment's end
            high = min(high, at0 / (at0 - at1))
    return low, high


def worth(levels: Sequence[float], most: int) -> list[float]:
    """[the most b draft nodes can be worth together, b = 0..most], in tokens.

    A node d deep is worth at most ``levels[0] x ... x levels[d - 1]`` (its value is the product of
    its path's rates, each at most the best rate learned at its depth), and the nodes of one depth
    together at most 1 (siblings exclude each other, `ladref.batched.policy.exclusive`). The most b
    nodes are worth is then the b largest of these shares (each depth's nodes, a full share each
    while they sum to less than 1, the rest in one): a depth's shares are equal, so taking the
    largest first is the best allocation.

    Args:
        levels: (D,) the best rate at depths 1..D, each in [0, 1]; most: the widest b asked for.
    """
    shares, reach = [], 1.0
    for rate in levels:
        reach *= rate
        if reach <= 0.0:
            break
        whole = min(most, int(1.0 / reach))
        shares += [reach] * whole + ([1.0 - whole * reach] if whole < most and whole * reach < 1.0 else [])
    shares = sorted(shares, reverse=True)[:most]
    out = [0.0]
    for share in shares + [0.0] * (most - len(shares)):
        out.append(out[-1] + share)
    return out


class BatchPrices:
    """A batch's step times t(q, kv, B) as its policy prices them.

    Args:
        surface: the measured surface; settings: whether passes are timed (``calibrate``) and how
            fast the corrections move (``smoothing``); device: where `times` lives.
        span: the widths priced, q = 1..span (infinite where the surface did not measure); None: its own.

    Attributes:
        corrections: log(measured / modelled) per width bucket (the surface's next measured width), 0: any.
        version: counts the corrections' changes (a curve is cached per B, kv and version).
    """

    def __init__(self, surface: CostSurface, settings: PolicySettings, device: torch.device, span: int | None = None) -> None:
        self.surface, self.settings, self.device, self.span = surface, settings, device, span
        self.models: dict[int, CostModel] = {}
        self.corrections: dict[int, float] = {}
        self.version = 0
        self._bases: dict[tuple[int, float], list[float]] = {}  # the surface's curves, per (B, kv): a few dozen at most
        self._factors: tuple[int, list[float]] | None = None  # exp(correction) per q, at a version
        self._buckets: list[int] = []  # each q's bucket, q = 1..M
        self._times: tuple[tuple, torch.Tensor] | None = None
        self._gates: dict[tuple, tuple[float, float]] = {}  # `may_draft`'s answer per segment

    def model(self, rows: int) -> CostModel:
        """t(q, kv) of a pass of `rows` rows (`CostSurface.at`, worked out once per B)."""
        if rows not in self.models:
            self.models[rows] = self.surface.at(rows)
        return self.models[rows]

    def bucket(self, q: int) -> int:
        """The width whose correction a q-token pass takes: the next measured one, else the widest."""
        widths = self.surface.widths
        return widths[min(bisect.bisect_left(widths, q), len(widths) - 1)]

    def base(self, rows: int, kv: float) -> list[float]:
        """[t(q, kv) for q = 1..M] of a pass of `rows` rows as the surface has it (infinite where not measured)."""
        if (rows, kv) not in self._bases:
            if len(self._bases) > 64:
                self._bases.clear()
            curve = self.model(rows).curve(kv)
            self._bases[rows, kv] = curve if self.span is None else (curve + [math.inf] * self.span)[: self.span]
        return self._bases[rows, kv]

    def curve(self, rows: int, kv: float) -> list[float]:
        """`base`, corrected: each width's time times exp(its bucket's correction, else the overall one)."""
        base = self.base(rows, kv)
        if not self.corrections:
            return base
        if self._factors is None or self._factors[0] != self.version or len(self._factors[1]) != len(base):
            if len(self._buckets) != len(base):
                self._buckets = [self.bucket(q) for q in range(1, len(base) + 1)]
            default = self.corrections.get(0, 0.0)
            factor = {b: math.exp(self.corrections.get(b, default)) for b in set(self._buckets)}  # one per bucket
            self._factors = (self.version, [factor[b] for b in self._buckets])
        return [t * f for t, f in zip(base, self._factors[1])]

    def times(self, rows: int, kv: int) -> torch.Tensor:
        """(M,) float64 `curve` on the device."""
        key = (rows, kv, self.version)
        if self._times is None or self._times[0] != key:
            self._times = (key, on_device(self.curve(rows, kv), self.device))
        return self._times[1]

    def timed(self, passes: Sequence[Pass], seconds: float) -> None:
        """The passes run between two reads took `seconds` in all (their host work too): move the
        corrections of their buckets, and the overall one, toward log(measured / modelled)."""
        if not self.settings.calibrate or not seconds > 0:
            return
        modelled = sum(self.model(rows).time(min(q, self.model(rows).max_width), kv) for q, rows, kv in passes)
        if not 0 < modelled < math.inf:
            return
        error, default = math.log(seconds / modelled), self.corrections.get(0, 0.0)
        for key in sorted({self.bucket(q) for q, _, _ in passes}) + [0]:  # one odd run moves a correction little
            old = self.corrections.get(key)  # a bucket's first timing moves it from the overall one, all the way
            base, weight = (default, 1.0) if old is None else (old, self.settings.smoothing)
            self.corrections[key] = base + weight * max(-1.0, min(1.0, error - base))
        self.version += 1
        self._gates.clear()

    def may_draft(self, rows: int, kv: int, window_cells: int | None, trust: float, bonus: float,
                  levels: tuple[float, ...] | None = None) -> bool:
        """Whether, for some row of a pass of `rows` rows at `kv`, b >= 1 nodes or the window could beat
        a plain step, b nodes worth `trust` x b tokens (`levels` None) or `trust` x ``worth(levels)[b]``,
        and the window `bonus`, the other rows yielding one token each (their least):
        `DraftPolicy.may_draft` with ``Load(rows - 1)``, on the host."""
        kvs = self.surface.kv_lengths
        j = bisect.bisect_left(kvs, kv)
        ends = (kvs[j - 1], kvs[j]) if 0 < j < len(kvs) else (kvs[min(j, len(kvs) - 1)],) * 2
        key = (rows, ends, window_cells, trust, bonus, levels, self.version)
        if key not in self._gates:
            if len(self._gates) > 256:
                self._gates.clear()
            self._gates[key] = paying(self._margins(rows, ends, window_cells, trust, bonus, levels))
        low, high = self._gates[key]
        w = (kv - ends[0]) / (ends[1] - ends[0]) if ends[1] > ends[0] else 0.0
        return w <= low or w >= high

    def _margins(self, rows: int, ends: tuple[int, int], window_cells: int | None, trust: float,
                 bonus: float, levels: tuple[float, ...] | None) -> Iterator[tuple[float, float]]:
        """Each width's margin at both ends of the segment (the finite ones), narrowest first, its best
        gain in tokens (b nodes alone, or b nodes and the window)."""
        curves = [self.curve(rows, kv) for kv in ends]
        nodes = list(range(len(curves[0]))) if levels is None else worth(levels, len(curves[0]))
        for q in range(2, len(curves[0]) + 1):
            gains = [trust * nodes[q - 1]]
            if window_cells is not None and q >= 1 + window_cells:
                gains.append(bonus + trust * nodes[q - 1 - window_cells])
            gain = max(gains)
            at0, at1 = ((rows + gain) * c[0] - rows * c[q - 1] for c in curves)
            if math.isfinite(at0) and math.isfinite(at1):
                yield at0, at1
