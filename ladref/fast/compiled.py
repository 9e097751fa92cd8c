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

import torch
from typing_extensions import Unpack

from ..batched.loop import decode_batch
from ..batched.sources import batched_sources
from ..call import prompt_ids
from ..config import LookaheadConfig, check_int
from ..facts import check_model
from ..options import OutputOptions, accept
from ..pricing.compiling import MODES as RUNNER_MODES
from ..pricing.compiling import check_mode
from ..proposer import MAX_DRAFT_DEPTH
from ..results import DecodeResult
from ..sources.lookahead import LookaheadProposer
from ..types import TokenIds
from .static import StaticRunner

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
