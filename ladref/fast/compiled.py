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

The step is the same `ladref.step.draft_step` (the same mask, pool and verifier) the eager
decoder runs; the host side (pool lookup, verification) stays plain Python on small tensors,
outside the graph. With ``config=None`` the decoder is the compiled greedy baseline, built the
same way (a 1-token step over the same static cache).

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

from ..call import DecodeCall, prompt_ids
from ..config import LookaheadConfig, check_int
from ..decoders.greedy import run_greedy
from ..options import CallOptions, OutputOptions, accept
from ..proposer import Proposer, check_proposers
from ..results import DecodeResult
from ..facts import check_model
from ..sources.lookahead import LookaheadProposer
from ..step import run_drafting
from ..types import TokenIds
from .adaptive import AdaptiveDecoder
from ..pricing.compiling import MODES as RUNNER_MODES
from ..pricing.compiling import check_mode, check_widths
from ..pricing.cost_cache import CostCache
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

    @torch.inference_mode()
    def _decode(self, input_ids: TokenIds, max_new_tokens: int, options: OutputOptions) -> DecodeResult:
        extent = self.extent
        call = DecodeCall.begin(self.model, input_ids, max_new_tokens, extent, options, self.runner)
        if not self.fits(call.prompt.shape[0], max_new_tokens):
            raise ValueError(f"prompt ({call.prompt.shape[0]}) + max_new_tokens ({max_new_tokens}) + step width ({extent}) = "
                             f"{call.prompt.shape[0] + max_new_tokens + extent} exceeds this decoder's max_length "
                             f"{self.runner.max_length}")
        if self.config is None:
            run_greedy(self.runner, call.prompt, call.sink, call.stats)
        else:
            run_drafting(self.runner, call.prompt, [LookaheadProposer(self.config)], call.sink, call.stats)
        return call.finish(self.method)


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
        proposers: the draft sources, one list shared by every length's decoder, so a source that
            keeps state across calls keeps it whatever cache a call takes (e.g.
            `ladref.fast.adaptive.remembering_proposers`); default each decoder's `default_proposers`.
        keep_learning: each length's decoder keeps its learned acceptance across calls (`AdaptiveDecoder`).

    Attributes:
        decoders: one `AdaptiveDecoder` per length, shortest first (after `warmup`).
        capture_s: seconds the compilation and the cost measurements took (`warmup`), None before it.

    Example:
        >>> decoder = CompiledAdaptiveDecoder(model, max_lengths=(512, 2048))
        >>> decoder.warmup()                      # compile every width of every cache: once
        >>> result = decoder(ids, 128)            # runs over the shortest cache that holds it
    """

    def __init__(self, model: torch.nn.Module, *, max_lengths: int | Sequence[int], widths: Sequence[int] = DEFAULT_WIDTHS,
                 mode: str | None = "auto", cache: CostCache | None = None, attention_backend: str = "auto",
                 compile_dir: str | os.PathLike | None = None, proposers: Sequence[Proposer] | None = None,
                 keep_learning: bool = False) -> None:
        self.facts = check_model(model)
        self.proposers = None if proposers is None else check_proposers(list(proposers))
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
        self.decoders: list[AdaptiveDecoder] = []
        self.capture_s: float | None = None

    def warmup(self) -> float:
        """Compile every width of every runner, then measure each runner's cost curve; returns `capture_s`."""
        if self.capture_s is None:
            start = time.perf_counter()
            for runner in self.runners:
                runner.compile()  # every width, before the cost curve is measured through them
                self.decoders.append(AdaptiveDecoder(self.model, cache=self.cost_cache, proposers=self.proposers, runner=runner,
                                                     keep_learning=self.keep_learning, attention_backend=self.attention_backend))
            self.capture_s = time.perf_counter() - start
        return self.capture_s

    def decoder_for(self, prompt_tokens: int, max_new_tokens: int) -> AdaptiveDecoder:
        """The decoder of the shortest cache holding prompt + max_new_tokens + the widest step."""
        self.warmup()
        need = prompt_tokens + max_new_tokens + self.widths[-1]
        for decoder in self.decoders:
            if need <= decoder.runner.max_length:
                return decoder
        raise ValueError(f"prompt ({prompt_tokens}) + max_new_tokens ({max_new_tokens}) + widest step ({self.widths[-1]}) = "
                         f"{need} exceeds the longest static cache, max_lengths {[r.max_length for r in self.runners]}")

    def __call__(self, input_ids: TokenIds, max_new_tokens: int = 64, **options: Unpack[CallOptions]) -> DecodeResult:
        """Decode one prompt over the shortest cache that fits (`ladref.options.CallOptions`: as an `AdaptiveDecoder` call).

        The first call runs `warmup` first; its cost is in `capture_s`, not in ``stats.wall_time_s``.
        Returns a `DecodeResult` with method "adaptive"; greedy output identical to `greedy_decode`.
        """
        prompt = prompt_ids(self.facts, input_ids)  # checked here: its length picks the cache
        return self.decoder_for(prompt.shape[0], max_new_tokens)(prompt, max_new_tokens, **options)
