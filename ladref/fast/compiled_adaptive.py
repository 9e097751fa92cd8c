"""Adaptive decoding over compiled static caches of a few lengths: each call takes the shortest that fits.

The engine's loop (`ladref.batched.loop.decode_batch`, one prompt a batch of one) over a
`ladref.fast.static.StaticRunner` per cache length (`ladref.batched.runner_cache.RunnerCache`),
its steps chosen by the batch policy (`ladref.batched.policy.BatchPolicy`) on the runner's measured
curve padded to its widths.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..batched.policy import BatchPolicy
from ..call import prompt_ids
from ..config import check_int
from ..facts import check_model
from ..options import CallOptions, accept
from ..pricing.compiling import check_widths
from ..pricing.cost import CostModel
from ..pricing.cost_cache import CostCache
from ..pricing.surface import CostSurface
from ..proposer import Proposer, check_proposers
from ..results import DecodeResult
from ..sampling import chooser_for
from ..types import TokenIds
from .adaptive import decode_adaptively, default_proposers, kv_lengths_for
from .compiled import resolve_mode
from .package_record import weights_digest
from .precompiled import COST_FILE, check_compile_dir
from .static import DEFAULT_WIDTHS, StaticRunner


def check_max_lengths(max_lengths: object) -> tuple[int, ...]:
    """`max_lengths` (an int or a sequence of them, each >= 2) as an increasing tuple, or a clear error."""
    lengths = (max_lengths,) if isinstance(max_lengths, int) and not isinstance(max_lengths, bool) else max_lengths
    if not isinstance(lengths, Sequence) or not lengths:
        raise TypeError(f"max_lengths must be an int or a non-empty sequence of ints, got {max_lengths!r}")
    for length in lengths:
        check_int("max_lengths", length, 2)
    return tuple(sorted(set(lengths)))


class CompiledAdaptiveDecoder:
    """Adaptive decoding over compiled static caches of a few lengths: each call takes the shortest that fits.

    A step compiled in the process attends over every slot of its static cache, used or not. On a
    CPU that is not free: Inductor's frozen max-autotune step of SmolLM2-135M (float32, 2 threads)
    took 39 ms for 8 tokens over 512 slots and 54 ms over 1,536. One `ladref.fast.static.StaticRunner`
    per length (each with the same widths, each compiled once, each with its own measured cost
    curve) keeps a short prompt's steps as cheap as its cache allows. (A step loaded from a package
    in `compile_dir` attends over the slots it uses where the model allows,
    `ladref.fast.static.StaticRunner.cuts`; there one length, the longest, serves as well.)
    A call is the engine's (`ladref.batched.loop.decode_batch`, a batch of one over the runner):
    `ladref.batched.policy.BatchPolicy` chooses each step, priced on the runner's curve padded to
    its widths (`ladref.pricing.cost.CostModel.stairs`) and calibrated by the passes' times.

    Args:
        model: a decoder-only transformers model (eager or SDPA attention, full-attention cache).
        max_lengths: M of each static cache (an int: one); a call needs
            prompt + max_new_tokens + the widest step <= M of some cache.
        widths: the step widths every runner compiles (`ladref.fast.static.StaticRunner`).
        mode: compile mode as `CompiledDecoder`'s ("auto": CUDA graphs on CUDA, frozen
            max-autotune Inductor elsewhere; None: the same padded steps, not compiled).
        cache: where the runners' cost curves are kept (`ladref.pricing.cost_cache.CostCache`); default
            the file ``cost.json`` in `compile_dir`, beside the packages the curves were measured
            through (so a later process neither compiles nor measures), else `CostCache.default()`,
            the user's cache file (measured once per runner and machine).
        attention_backend: SDPA kernel choice (`ladref.kernels.sdpa_backends`).
        compile_dir: a folder where every runner keeps its compiled steps as AOTInductor packages,
            loaded by later decoders instead of compiling again (`ladref.fast.static.StaticRunner`).
        proposers: the draft sources, one list shared by every length, so a source that keeps
            state across calls keeps it whatever cache a call takes (e.g.
            `ladref.fast.adaptive.remembering_proposers`); default `default_proposers`.
        keep_learning: keep the learned acceptance from one call to the next (False: each call afresh).
        cost: one curve t(q, kv) to price every runner's steps with, taken as it is (not calibrated);
            default each runner's own, measured through it in `cache` and calibrated as decoding goes.

    Attributes:
        costs: each runner's measured curve, shortest cache first (after `warmup`); surfaces: the
            same padded to the runner's widths (`CostModel.stairs`), what its calls are priced on.
        policy: the last call's `BatchPolicy`.
        capture_s: seconds the compilation and the cost measurements took (`warmup`), None before it.

    Example:
        >>> decoder = CompiledAdaptiveDecoder(model, max_lengths=(512, 2048))
        >>> decoder.warmup()                      # compile every width of every cache: once
        >>> result = decoder(ids, 128)            # runs over the shortest cache that holds it
    """

    def __init__(self, model: torch.nn.Module, *, max_lengths: int | Sequence[int], widths: Sequence[int] = DEFAULT_WIDTHS,
                 mode: str | None = "auto", cache: CostCache | None = None, attention_backend: str = "auto",
                 compile_dir: str | os.PathLike | None = None, proposers: Sequence[Proposer] | None = None,
                 keep_learning: bool = False, cost: CostModel | None = None) -> None:
        self.facts = check_model(model)
        if cost is not None and not isinstance(cost, CostModel):
            raise TypeError(f"cost must be a CostModel or None, got {type(cost).__name__}")
        self.cost = cost
        self.proposers = check_proposers(list(proposers) if proposers is not None else default_proposers(model))
        self.keep_learning = keep_learning
        lengths = check_max_lengths(max_lengths)
        self.widths = check_widths(widths, lengths[0])
        self.mode = resolve_mode(mode, self.facts.device)
        self.model, self.attention_backend = model, attention_backend
        directory = check_compile_dir(compile_dir, self.mode)  # a folder's path, or None; checked before hashing the weights
        weights = None if directory is None else weights_digest(model)  # once for every runner's package
        self.runners = [StaticRunner(model, m, attention_backend, compile_mode=self.mode, widths=self.widths, compile_dir=directory,
                                     weights=weights) for m in lengths]
        self.cost_cache = CostCache.given(cache, None if directory is None else directory / COST_FILE)
        self.costs: list[CostModel] = []
        self.surfaces: list[CostSurface] = []
        self.policy: BatchPolicy | None = None
        self.capture_s: float | None = None

    def warmup(self) -> float:
        """Compile every width of every runner, then measure each runner's cost curve; returns `capture_s`."""
        if self.capture_s is None:
            start = time.perf_counter()
            for runner in self.runners:
                runner.compile()  # every width, before the cost curve is measured through them
                self.costs.append(self.cost or self.cost_cache.get(self.model, runner, widths=self.widths,
                                                                   kv_lengths=kv_lengths_for(self.model, runner),
                                                                   attention_backend=self.attention_backend))
                self.surfaces.append(CostSurface.of(self.costs[-1].stairs(self.widths)))
            self.capture_s = time.perf_counter() - start
        return self.capture_s

    def runner_for(self, prompt_tokens: int, max_new_tokens: int) -> int:
        """The index of the shortest cache holding prompt + max_new_tokens + the widest step."""
        self.warmup()
        need = prompt_tokens + max_new_tokens + self.widths[-1]
        for k, runner in enumerate(self.runners):
            if need <= runner.max_length:
                return k
        raise ValueError(f"prompt ({prompt_tokens}) + max_new_tokens ({max_new_tokens}) + widest step ({self.widths[-1]}) = "
                         f"{need} exceeds the longest static cache, max_lengths {[r.max_length for r in self.runners]}")

    def __call__(self, input_ids: TokenIds, max_new_tokens: int = 64, **options: Unpack[CallOptions]) -> DecodeResult:
        """Decode one prompt over the shortest cache that fits (`ladref.options.CallOptions`: as an `AdaptiveDecoder` call).

        The first call runs `warmup` first; its cost is in `capture_s`, not in ``stats.wall_time_s``.
        Returns a `DecodeResult` with method "adaptive"; greedy output identical to `greedy_decode`.
        """
        options = accept("CompiledAdaptiveDecoder.__call__", options, CallOptions)
        prompt = prompt_ids(self.facts, input_ids)  # checked here: its length picks the cache
        k = self.runner_for(prompt.shape[0], max_new_tokens)
        chooser_for(options)  # the sampling keywords, checked before any forward pass
        result, self.policy = decode_adaptively(self.model, [prompt], [max_new_tokens], options, self.proposers,
                                                self.surfaces[k], self.cost is None,
                                                self.policy if self.keep_learning else None, self.widths[-1], self.runners[k])
        return result[0]
