"""The cost surface t(q, kv, B): a step's time when each of the B rows of a batch feeds q tokens.

A batch of B greedy rows feeds B tokens per forward pass; a batch whose rows draft feeds B x q.
Both spend the same headroom: the tokens a pass can take before it costs more than one read of
the weights. On this project's CPU (2 cores) that ridge is ~11 tokens, so a batch of 8 greedy rows
has nearly used it up and a draft makes every pass dearer; on a GPU (launch-bound, ridge in the
hundreds) it is far away, and drafting keeps paying. `CostSurface` is the measured table, one
`ladref.pricing.cost.CostModel` per batch size B (same widths and KV lengths), and `at(B)` the curve
a row of a batch of B prices its step with (`ladref.fast.adaptive`).

Between measured batch sizes `at` interpolates linearly, entry by entry; beyond the largest it
extends the last two linearly (a compute-bound pass grows in proportion to B), never below the
largest measured. `roofline` builds the synthetic surface max(weights read, B x q x per-token
compute): CPU- or GPU-shaped, for tests, tutorials and predictions labelled as a model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import check_int
from ..facts import check_model
from ..kernels import sdpa_backends
from ..runner import ModelRunner
from .cost import DEFAULT_KV_LENGTHS, CostModel, check_axis
from .cost_cache import CostCache
from .timing import Progress, describe, measure_batch_steps, processor

DEFAULT_BATCHES = (1, 2, 4, 8, 16)
BATCH_WIDTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32)
"""Default widths of a measured surface: up to a lookahead step (1 + (N-1)(W+G) = 25 at 4/4/4); a batch of
16 rows of 32 tokens (512 a pass) is far past a CPU's ridge."""
FORMAT = "ladref.cost-surface/1"


@dataclass(frozen=True)
class CostSurface:
    """Measured step times t(q, kv, B), in seconds: one cost curve per batch size.

    Attributes:
        batches: the batch sizes B measured, strictly increasing, starting at 1.
        models: ``models[k]``: t(q, kv) when every one of ``batches[k]`` rows feeds q tokens; all
            with the same widths and KV lengths.
        label: what was measured, for people.

    Raises:
        ValueError: batches unsorted or not from 1, a count of models that does not match, or
            models measured at different widths or KV lengths.
    """

    batches: tuple[int, ...]
    models: tuple[CostModel, ...]
    label: str = ""

    def __post_init__(self) -> None:
        batches, models = check_axis("batches", self.batches, 1), tuple(self.models)
        if batches[0] != 1:
            raise ValueError(f"batches must start at 1 (a single row is the unit), got {batches}")
        if len(models) != len(batches) or not all(isinstance(m, CostModel) for m in models):
            raise ValueError(f"a CostSurface needs one CostModel per batch size {batches}, got {len(models)} models")
        if any((m.widths, m.kv_lengths) != (models[0].widths, models[0].kv_lengths) for m in models):
            raise ValueError("every batch size's CostModel must be measured at the same widths and KV lengths")
        object.__setattr__(self, "batches", batches)
        object.__setattr__(self, "models", models)

    @property
    def widths(self) -> tuple[int, ...]:
        return self.models[0].widths

    @property
    def kv_lengths(self) -> tuple[int, ...]:
        return self.models[0].kv_lengths

    def at(self, batch: int) -> CostModel:
        """t(q, kv) of a pass of `batch` rows: measured, between measured sizes, or extended past the largest."""
        check_int("batch", batch, 1)
        if batch in self.batches:
            return self.models[self.batches.index(batch)]
        k = next((k for k, b in enumerate(self.batches) if b > batch), len(self.batches) - 1)
        if len(self.batches) == 1:
            return self.models[0]
        (b0, m0), (b1, m1) = (self.batches[k - 1], self.models[k - 1]), (self.batches[k], self.models[k])
        w = (batch - b0) / (b1 - b0)
        floor = batch > b1  # beyond the largest: never cheaper than it
        seconds = tuple(tuple(max(t0 + w * (t1 - t0), t1 if floor else 0.0) for t0, t1 in zip(r0, r1))
                        for r0, r1 in zip(m0.seconds, m1.seconds))
        return CostModel(m0.widths, m0.kv_lengths, seconds, f"{self.label} at batch {batch}")

    def time(self, q: float, kv: float | None = None, batch: int = 1) -> float:
        """t(q, kv, B): seconds of one pass in which each of `batch` rows feeds q tokens."""
        return self.at(batch).time(q, kv)

    def relative(self, q: float, kv: float | None = None, batch: int = 1) -> float:
        """t(q, kv, B) / t(1, kv, B): the tokens each row's q-token step must yield to match batched greedy."""
        curve = self.at(batch)
        return curve.time(q, kv) / curve.time(1, kv)

    @classmethod
    def of(cls, cost: CostModel) -> CostSurface:
        """A surface that knows batch 1 only (`at` returns `cost` for every B: drafting priced as if alone)."""
        return cls((1,), (cost,), cost.label)

    @classmethod
    def roofline(cls, weights_s: float, token_s: float, widths: Sequence[int] = BATCH_WIDTHS,
                 batches: Sequence[int] = DEFAULT_BATCHES, label: str = "") -> CostSurface:
        """The synthetic surface t(q, B) = max(weights_s, B x q x token_s), at one KV length.

        Args:
            weights_s: the seconds one read of the weights takes (a pass can take no less).
            token_s: the seconds one token's compute takes; the ridge is weights_s / token_s tokens.

        Example: a CPU-like surface (ridge 11 tokens) ``roofline(0.015, 0.0014)``; a GPU-like one
        (ridge 500) ``roofline(0.01, 0.00002)``.
        """
        if not (weights_s > 0 and token_s > 0):
            raise ValueError(f"weights_s and token_s must be > 0, got {weights_s}, {token_s}")
        models = tuple(CostModel.from_times({q: max(weights_s, b * q * token_s) for q in widths}) for b in batches)
        return cls(tuple(batches), models, label or f"roofline, ridge {weights_s / token_s:.0f} tokens (synthetic)")

    @classmethod
    def measure(cls, model: torch.nn.Module, batches: Sequence[int] = DEFAULT_BATCHES, widths: Sequence[int] = BATCH_WIDTHS,
                kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS, repeats: int = 3, attention_backend: str = "auto",
                progress: Progress | None = None) -> CostSurface:
        """Time the batched forward pass a batch's step runs (`ladref.pricing.timing.measure_batch_steps`), every B.

        Args:
            batches: B values, from 1; widths: q values, from 1; kv_lengths: each >= 1.
            repeats: timed passes per (q, kv, B), the fastest kept.
            progress: called after every pass with (passes done in this B, passes in this B).
        """
        facts = check_model(model)
        batches = check_axis("batches", batches, 1)
        models = tuple(batch_curve(model, b, widths, kv_lengths, repeats, attention_backend, progress) for b in batches)
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
        dtype = str(facts.dtype).removeprefix("torch.")
        threads = f", {torch.get_num_threads()} threads" if facts.device.type == "cpu" else ""
        return cls(batches, models, f"{Path(name).name} {facts.device} {dtype}{threads}, batched DynamicCache pass")

    def to_dict(self) -> dict:
        """A JSON-ready dict (`from_dict` reads it back)."""
        return {"format": FORMAT, "label": self.label, "batches": list(self.batches), "models": [m.to_dict() for m in self.models]}

    @classmethod
    def from_dict(cls, data: dict) -> CostSurface:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} cost surface")
        return cls(tuple(data["batches"]), tuple(CostModel.from_dict(m) for m in data["models"]), data.get("label", ""))

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """Write the surface as JSON (folders created), with optional provenance `meta`."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(self.to_dict(), **({"meta": meta} if meta else {})), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> CostSurface:
        data = json.loads(Path(path).read_text())
        return cls.from_dict({k: v for k, v in data.items() if k != "meta"})


def batch_curve(model: torch.nn.Module, batch: int, widths: Sequence[int] = BATCH_WIDTHS, kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS,
                repeats: int = 3, attention_backend: str = "auto", progress: Progress | None = None) -> CostModel:
    """t(q, kv) of a batched pass of `batch` rows (`ladref.pricing.timing.measure_batch_steps`)."""
    facts = check_model(model)
    widths, kv_lengths = check_axis("widths", widths, 1), check_axis("kv_lengths", kv_lengths, 1)
    check_int("batch", batch, 1)
    check_int("repeats", repeats, 1)
    kernels = sdpa_backends(attention_backend, facts.device, facts.attention)
    return CostModel(widths, kv_lengths, measure_batch_steps(model, facts, batch, widths, kv_lengths, repeats, kernels, progress),
                     f"batch {batch}")


def batches_up_to(batch: int, measured: Sequence[int] = DEFAULT_BATCHES) -> tuple[int, ...]:
    """The batch sizes to measure for a batch of `batch` rows: those of `measured` below it, and the
    first one at or above it (or `batch` itself, past the last)."""
    below = tuple(b for b in measured if b < batch)
    return below + (next((b for b in measured if b >= batch), batch),)


def cached_surface(cache: CostCache, model: torch.nn.Module, batches: Sequence[int], *, widths: Sequence[int] = BATCH_WIDTHS,
                   kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS, repeats: int = 3, attention_backend: str = "auto") -> CostSurface:
    """The surface at `batches`, each batch size's curve taken from `cache` (measured and kept there once)."""
    where = surface_key(model, 0, widths, kv_lengths, attention_backend).split(" | batched pass")[0]
    models = tuple(cache.remember(surface_key(model, b, widths, kv_lengths, attention_backend),
                                  lambda b=b: batch_curve(model, b, widths, kv_lengths, repeats, attention_backend))
                   for b in batches)
    return CostSurface(tuple(batches), models, f"{where}, batched passes")


def surface_key(model: torch.nn.Module, batch: int, widths: Sequence[int] = BATCH_WIDTHS,
                kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS, attention_backend: str = "auto") -> str:
    """The `CostCache` key of the curve of a batched pass of `batch` rows (`cached_surface` keeps it there)."""
    runner = ModelRunner(model, attention_backend)
    return (f"{describe(model, runner)} | {processor(runner.device)} | batched pass of {batch} rows | widths {list(widths)} "
            f"| kv {list(kv_lengths)}")
