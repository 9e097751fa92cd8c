"""Compiled decoding: constant-shape steps over a static KV cache, captured once and replayed.

On a GPU a decoding step of a small model costs a few hundred kernel launches, not arithmetic;
capturing the step as a CUDA graph (``torch.compile(mode="reduce-overhead")``) replays all of
them as one. A graph has fixed shapes, and lookahead steps change shape twice over: the draft
tree's size varies and the KV cache grows. `CompiledDecoder` removes both:

* every step feeds the same (N-1)(W+G) tokens: the window and the tree, padded with dummies
  that nothing sees (`ladref.fast.static.pad_step`), so ids, positions and mask keep one shape;
* the KV cache is preallocated (`ladref.fast.static.StaticRunner`): a step writes its tokens into the
  next slots and attends over the whole cache with the unused slots masked; the accepted branch
  is committed in place (a constant-size gather, a length counter), not by concatenation.

The loop is the engine's (`ladref.batched.loop.decode_batch`, one prompt a batch of one), its
cache the static runner's (`ladref.batched.runner_cache.RunnerCache`): the same step, sources,
policy, sampler and streamer as every batch, only the forward pass compiled. With ``config=None``
the decoder is the compiled greedy baseline, built the same way (a 1-token step over the same
static cache).

How the step compiles depends on the device (``mode="auto"``): on CUDA it is captured as a CUDA
graph ("reduce-overhead"); on a CPU Inductor compiles it with frozen weights and its
max-autotune GEMM templates ("max-autotune"), the freezing scoped to that compilation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..batched.loop import decode_batch
from ..batched.policy import BatchPolicy
from ..batched.sample import BatchSampler
from ..batched.sources import batched_sources
from ..call import prompt_ids
from ..config import LookaheadConfig, check_int
from ..options import CallOptions, OutputOptions, accept
from ..pricing.compiling import MODES as RUNNER_MODES
from ..pricing.compiling import check_mode, check_widths
from ..pricing.cost import CostModel
from ..pricing.cost_cache import CostCache
from ..pricing.policy import PolicySettings
from ..pricing.surface import CostSurface
from ..proposer import MAX_DRAFT_DEPTH, Proposer, check_proposers, step_needs
from ..results import DecodeResult
from ..facts import check_model
from ..sampling import chooser_for
from ..sources.lookahead import LookaheadProposer
from ..types import TokenIds
from .adaptive import carry, default_proposers, kv_lengths_for
from .package_record import weights_digest
from .precompiled import COST_FILE, check_compile_dir
from .static import DEFAULT_WIDTHS, StaticRunner

MODES = ("auto", *RUNNER_MODES)


def resolve_mode(mode: object, device: torch.device) -> str | None:
    """"auto": "reduce-overhead" (CUDA graphs) on CUDA, "max-autotune" (frozen Inductor) elsewhere; else `mode`, checked."""
    if mode not in MODES:
        raise ValueError(f"unknown compile mode {mode!r}; choose one of {MODES}")
    if mode == "auto":
        return "reduce-overhead" if device.type == "cuda" else "max-autotune"
    check_mode(mode, device)
    return mode


class CompiledDecoder:
    """Greedy or lookahead decoding, captured once per (model, config, max_length), then replayed.

    Args:
        model: a decoder-only transformers model (eager or SDPA attention, full-attention cache).
        config: W, N, G for lookahead decoding; None for the compiled greedy baseline.
        max_length: M, positions of the static cache: prompt + max_new_tokens + one step's width
            must fit in every call.
        mode: "auto" ("reduce-overhead" on CUDA, "max-autotune" elsewhere), or a
            `ladref.fast.static.StaticRunner` compile mode: "reduce-overhead" (CUDA graphs, CUDA only),
            "max-autotune" (frozen weights, Inductor's max-autotune GEMM templates) or "default";
            None runs the constant-shape path without compiling.
        attention_backend: SDPA kernel choice (`ladref.kernels.sdpa_backends`).
        compile_dir: a folder where the compiled step is kept as an AOTInductor package, loaded by
            later decoders instead of compiling again (`ladref.fast.static.StaticRunner`).

    Attributes:
        capture_s: seconds the one-time compilation and capture took (`warmup`), None before it.

    Example:
        >>> decoder = CompiledDecoder(model, LookaheadConfig(15, 5, 15), max_length=1024)
        >>> decoder.warmup()                      # compile and capture: once
        >>> result = decoder(ids, 256)            # every call after replays the captured step
    """

    def __init__(self, model: torch.nn.Module, config: LookaheadConfig | None = None, *, max_length: int,
                 mode: str | None = "auto", attention_backend: str = "auto", compile_dir: str | os.PathLike | None = None) -> None:
        if config is not None and not isinstance(config, LookaheadConfig):
            raise TypeError(f"config must be a LookaheadConfig or None, got {type(config).__name__}")
        check_int("max_length", max_length, 2)
        self.mode = resolve_mode(mode, check_model(model).device)
        self.model, self.config = model, config
        slots = 1 if config is None else config.ngram_size
        self.step_tokens = 1 if config is None else config.max_step_tokens()
        self.runner = StaticRunner(model, max_length, attention_backend, self.mode, commit_slots=slots, step_width=self.step_tokens,
                                   compile_dir=compile_dir)
        self.capture_s: float | None = None

    @property
    def method(self) -> str:
        """"compiled_greedy" or "compiled_lookahead"."""
        return "compiled_greedy" if self.config is None else "compiled_lookahead"

    @property
    def extent(self) -> int:
        """Static-cache slots past the last committed token a step writes: its padded width (N, if
        wider); on a static cache this, not the lookahead reach, bounds a call."""
        return self.step_tokens if self.config is None else max(self.step_tokens, self.config.ngram_size)

    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        """Whether a call of this prompt length and budget fits in the static cache (prompt + new + `extent`)."""
        return prompt_tokens + max_new_tokens + self.extent <= self.runner.max_length

    def warmup(self) -> float:
        """Compile and capture the step (three short calls on a dummy prompt); returns `capture_s`.

        Timed separately from decoding: the cost is paid once per decoder, whatever the calls.
        """
        if self.capture_s is None:
            start = time.perf_counter()
            prompt = torch.arange(4) % self.runner.vocab_size
            for _ in range(3):  # compile; record the graphs; replay once
                self._decode(prompt, 2 * (self.config.ngram_size if self.config else 2), {"eos_token_id": []})
            self.capture_s = time.perf_counter() - start
        return self.capture_s

    def __call__(self, input_ids: TokenIds, max_new_tokens: int = 64, **options: Unpack[OutputOptions]) -> DecodeResult:
        """Decode one prompt; output identical to `greedy_decode` (exactly in float32 / float64).

        The first call runs `warmup` first; its cost is in `capture_s`, not in this call's
        ``stats.wall_time_s``.

        Args:
            input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
            max_new_tokens: most tokens to generate.
            **options: ``eos_token_id``, ``tokenizer``, ``streamer`` (`ladref.options.OutputOptions`).

        Returns:
            `DecodeResult` with method "compiled_greedy" or "compiled_lookahead"; a lookahead
            step's ``forward_tokens_per_step`` counts its real tokens; the padded step computes
            (N-1)(W+G) (`step_tokens`).
        """
        accept("CompiledDecoder.__call__", options, OutputOptions)
        self.warmup()
        return self._decode(input_ids, max_new_tokens, options)

    def _decode(self, input_ids: TokenIds, max_new_tokens: int, options: OutputOptions) -> DecodeResult:
        prompt = prompt_ids(self.runner.facts, input_ids)
        if not self.fits(prompt.shape[0], max_new_tokens):
            raise ValueError(f"prompt ({prompt.shape[0]}) + max_new_tokens ({max_new_tokens}) + step width ({self.extent}) = "
                             f"{prompt.shape[0] + max_new_tokens + self.extent} exceeds this decoder's max_length "
                             f"{self.runner.max_length}")
        proposers = [] if self.config is None else [LookaheadProposer(self.config)]
        sources = batched_sources(proposers, MAX_DRAFT_DEPTH, self.runner.vocab_size)
        return decode_batch(self.model, [prompt], [max_new_tokens], options, self.method, sources, extent=self.extent,
                            runner=self.runner)[0]


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
        costs: each runner's measured curve, shortest cache first (after `warmup`).
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
        sources = batched_sources(self.proposers, MAX_DRAFT_DEPTH, self.facts.vocab_size)
        surface = CostSurface.of(self.costs[k].stairs(self.widths))
        policy = BatchPolicy(surface, 1, [s.name for s in sources], max(s.depth for s in sources),
                             PolicySettings(calibrate=self.cost is None), self.facts.device, span=self.widths[-1])
        if self.keep_learning and self.policy is not None:
            carry(self.policy, policy)
        self.policy = policy
        return decode_batch(self.model, [prompt], [max_new_tokens], options, "adaptive", sources, policy,
                            BatchSampler.from_options(options, self.facts.device), step_needs(self.proposers, MAX_DRAFT_DEPTH).reach,
                            runner=self.runners[k])[0]
