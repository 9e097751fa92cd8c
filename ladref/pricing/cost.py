"""The cost model: t(q, kv), the time of one decoding step that feeds q tokens over kv cached ones.

A plain greedy step feeds 1 token and yields 1. A step that feeds q tokens (the current token plus
a draft: a lookahead window, n-gram candidates, a tree) costs t(q) and yields the tokens it
accepts, so it beats greedy only if it yields more than t(q) / t(1) tokens: its draft must carry
more than t(q) / t(1) - 1 accepted tokens. On a GPU t(q) is about flat for q up to hundreds (a
step is bound by reading the weights and launching kernels), so almost any draft pays; on a CPU
t(q) grows within a few tokens (SmolLM2-135M on 2 cores: 4 tokens about 1.2x one), so only a
draft that is likely to be accepted does. `relative` gives that ratio, `time` the seconds.

`CostModel` is the table measured: t at each width q (`widths`, starting at 1) and KV length
(`kv_lengths`), the fastest of a few timed passes. Between measured points it interpolates
linearly (in q, then in kv). It refuses a q beyond the widest step measured (the curve can bend
there: measure the widths you will feed), and beyond the KV lengths measured it uses the nearest
length's times (no extrapolation of noisy differences: measure lengths spanning your decoding,
prompt to prompt + max_new_tokens). A table, not a fitted line a(q) + b(q) kv, because it is what
was measured: a fit through three noisy CPU timings can tilt either way, a table never leaves the
range of its measurements.

Measuring once per model, device, dtype, thread count, runner and processor is the job of
`ladref.pricing.cost_cache.CostCache`, a JSON file of measured curves: `adaptive_decode` keeps its
curves in the user's cache folder, so only the first call on a machine measures. The timing
itself is `ladref.pricing.timing`. docs/cost_model.md shows the curve of a CPU.
"""

from __future__ import annotations

import bisect
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import check_int
from ..runner import ModelRunner, Runner
from .timing import Progress, describe, measure_steps

CPU_WIDTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
GPU_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256)
DEFAULT_KV_LENGTHS = (128, 512, 1024)
FORMAT = "ladref.cost/1"


def default_widths(device: torch.device) -> tuple[int, ...]:
    """Widths to measure: up to 64 on a CPU (where a step that wide already costs several greedy steps), up to 256 elsewhere."""
    return CPU_WIDTHS if device.type == "cpu" else GPU_WIDTHS


def check_axis(name: str, values: Sequence[int], low: int) -> tuple[int, ...]:
    values = tuple(values)
    if not values:
        raise ValueError(f"the cost curve is empty: no {name}")
    for value in values:
        check_int(f"each of {name}", value, low)
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be strictly increasing (sorted, no duplicates), got {values}")
    if name == "widths" and values[0] != 1:
        raise ValueError(f"widths must start at 1 (t(1), a greedy step, is the unit of relative cost), got {values}")
    return values


def _between(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """ys at x, linear between the sorted points xs, the end values outside them."""
    j = bisect.bisect_left(xs, x)
    if j == 0 or j == len(xs):
        return ys[min(j, len(xs) - 1)]
    w = (x - xs[j - 1]) / (xs[j] - xs[j - 1])
    return ys[j - 1] + w * (ys[j] - ys[j - 1])


@dataclass(frozen=True)
class CostModel:
    """Measured step times t(q, kv), in seconds.

    Attributes:
        widths: the step widths q measured, strictly increasing, starting at 1.
        kv_lengths: the KV-cache lengths measured, strictly increasing.
        seconds: ``seconds[i][j]`` = t(``widths[j]``, ``kv_lengths[i]``): one row per KV length.
        label: what was measured (model, device, dtype, threads, runner), for people.

    Raises:
        ValueError: an empty curve, unsorted or duplicate widths / lengths, a time that is not
            positive and finite, or a table whose shape does not match the axes.
    """

    widths: tuple[int, ...]
    kv_lengths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]
    label: str = ""

    def __post_init__(self) -> None:
        widths, kv = check_axis("widths", self.widths, 1), check_axis("kv_lengths", self.kv_lengths, 0)
        rows = tuple(tuple(row) for row in self.seconds)
        if len(rows) != len(kv) or any(len(row) != len(widths) for row in rows):
            raise ValueError(f"seconds must hold {len(kv)} rows (one per KV length) of {len(widths)} times "
                             f"(one per width), got {[len(row) for row in rows]}")
        for length, row in zip(kv, rows):
            for q, t in zip(widths, row):
                if isinstance(t, bool) or not isinstance(t, numbers.Real) or not (math.isfinite(t) and t > 0):
                    raise ValueError(f"t(q={q}, kv={length}) = {t!r}: every time must be a positive, finite number of seconds")
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "kv_lengths", kv)
        object.__setattr__(self, "seconds", tuple(tuple(float(t) for t in row) for row in rows))

    @property
    def max_width(self) -> int:
        """The widest step measured: `time` refuses wider ones."""
        return self.widths[-1]

    def times(self, kv: float | None = None) -> dict[int, float]:
        """{q: t(q, kv)} at the measured widths (kv may be omitted when one KV length was measured)."""
        if kv is None:
            if len(self.kv_lengths) > 1:
                raise ValueError(f"this cost model was measured at KV lengths {self.kv_lengths}: pass kv=")
            return dict(zip(self.widths, self.seconds[0]))
        if isinstance(kv, bool) or not isinstance(kv, numbers.Real) or not kv >= 0:
            raise ValueError(f"kv (cached tokens) must be a number >= 0, got {kv!r}")
        return {q: _between(self.kv_lengths, column, kv) for q, column in zip(self.widths, zip(*self.seconds))}

    def time(self, q: float, kv: float | None = None) -> float:
        """t(q, kv): seconds of one step feeding q tokens over kv cached tokens.

        Args:
            q: tokens fed, 1 <= q <= `max_width` (a fraction, e.g. a mean width, interpolates).
            kv: tokens in the KV cache; may be omitted when one KV length was measured.

        Raises:
            ValueError: q outside [1, max_width], kv negative, or kv omitted with several lengths.
        """
        if isinstance(q, bool) or not isinstance(q, numbers.Real) or not 1 <= q <= self.max_width:
            raise ValueError(f"q={q!r} is outside the widths measured, 1..{self.max_width}; "
                             "measure the widths you will feed (CostModel.measure(widths=...))")
        row = self.times(kv)
        return _between(self.widths, [row[w] for w in self.widths], q)

    def curve(self, kv: float | None = None, widths: Sequence[int] | None = None) -> list[float]:
        """[t(q, kv) for q in `widths`] (default q = 1..max_width: index q - 1), the KV interpolation done once."""
        row = self.times(kv)
        measured = [row[w] for w in self.widths]
        return [_between(self.widths, measured, q) for q in (range(1, self.max_width + 1) if widths is None else widths)]

    def relative(self, q: float, kv: float | None = None) -> float:
        """t(q, kv) / t(1, kv): the tokens a q-token step must yield to match greedy decoding."""
        return self.time(q, kv) / self.time(1, kv)

    def tokens_per_second(self, tokens: float, q: float, kv: float | None = None) -> float:
        """tokens / t(q, kv): the rate of a step that feeds q tokens and yields `tokens` on average."""
        return tokens / self.time(q, kv)

    @classmethod
    def from_times(cls, times: Mapping[int, float], kv_length: int = 0, label: str = "") -> CostModel:
        """A curve at one KV length from {q: seconds} (q = 1 included)."""
        widths = tuple(sorted(times))
        return cls(widths, (kv_length,), (tuple(times[q] for q in widths),), label)

    def stairs(self, widths: Sequence[int]) -> CostModel:
        """t(q, kv) of a step padded to the next of `widths` (at most `max_width`), for q = 1..the widest:
        what a runner of those compiled widths costs a step of q tokens."""
        if max(widths) > self.max_width:
            raise ValueError(f"width {max(widths)} is wider than this curve measures ({self.max_width})")
        bucket = [next(w for w in sorted(widths) if w >= q) for q in range(1, max(widths) + 1)]
        rows = tuple(tuple(_between(self.widths, row, w) for w in bucket) for row in self.seconds)
        return CostModel(tuple(range(1, max(widths) + 1)), self.kv_lengths, rows, f"{self.label}, padded to widths {list(widths)}")

    @classmethod
    def from_ratios(cls, ratios: Mapping[int, float], step_s: float = 0.05, label: str = "") -> CostModel:
        """A synthetic curve t(q) = ratios[q] * step_s, e.g. ``{1: 1.0, 2: 2.1, 64: 3.7}``."""
        return cls.from_times({q: r * step_s for q, r in ratios.items()}, label=label or "synthetic")

    @classmethod
    def flat(cls, max_width: int = 256, step_s: float = 0.01) -> CostModel:
        """A GPU-shaped synthetic curve: every width 1..max_width costs the same."""
        check_int("max_width", max_width, 1)
        widths = sorted({2**k for k in range(max_width.bit_length()) if 2**k <= max_width} | {max_width})
        return cls.from_ratios({q: 1.0 for q in widths}, step_s, label=f"flat to {max_width} (synthetic)")

    @classmethod
    def measure(cls, model: torch.nn.Module, widths: Sequence[int] | None = None,
                kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS, repeats: int = 5, runner: Runner | None = None,
                attention_backend: str = "auto", progress: Progress | None = None) -> CostModel:
        """Time real decoding steps through a runner (see `measure_steps`).

        Args:
            model: the transformers causal LM.
            widths: q values to time, from 1; default `default_widths` of the model's device.
            kv_lengths: KV lengths to time at, each >= 1.
            repeats: timed passes per (q, kv); the fastest is kept.
            runner: a `ladref.runner.Runner` with an empty cache (``ModelRunner``, ``StaticRunner``);
                default a new ``ModelRunner``.
            attention_backend: SDPA kernels of the default runner (`ladref.kernels.sdpa_backends`).
            progress: called after every pass with (passes done, passes in all).
        """
        runner = ModelRunner(model, attention_backend) if runner is None else runner
        widths = check_axis("widths", default_widths(runner.device) if widths is None else widths, 1)
        kv_lengths = check_axis("kv_lengths", kv_lengths, 1)
        check_int("repeats", repeats, 1)
        seconds = measure_steps(model, runner, widths, kv_lengths, repeats, progress)
        return cls(widths, kv_lengths, seconds, describe(model, runner))

    def to_dict(self) -> dict:
        """A JSON-ready dict (`from_dict` reads it back)."""
        return {"format": FORMAT, "label": self.label, "widths": list(self.widths), "kv_lengths": list(self.kv_lengths),
                "seconds": [list(row) for row in self.seconds]}

    @classmethod
    def from_dict(cls, data: Mapping) -> CostModel:
        """The inverse of `to_dict` (a "meta" entry, free provenance, is accepted and ignored)."""
        unknown = set(data) - {"format", "label", "widths", "kv_lengths", "seconds", "meta"}
        missing = {"widths", "kv_lengths", "seconds"} - set(data)
        if unknown or missing or data.get("format", FORMAT) != FORMAT:
            raise ValueError(f"not a {FORMAT} cost model: unknown keys {sorted(unknown)}, missing {sorted(missing)}, "
                             f"format {data.get('format')!r}")
        return cls(data["widths"], data["kv_lengths"], data["seconds"], data.get("label", ""))

    def save(self, path: str | Path, meta: Mapping | None = None) -> Path:
        """Write the model as JSON to `path` (folders created), with optional provenance `meta`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(self.to_dict(), **({"meta": dict(meta)} if meta else {})), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        """Read a model written by `save`."""
        return cls.from_dict(json.loads(Path(path).read_text()))
