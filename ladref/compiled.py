"""Compiled decoding: constant-shape steps over a static KV cache, captured once and replayed.

On a GPU a decoding step of a small model costs a few hundred kernel launches, not arithmetic;
capturing the step as a CUDA graph (``torch.compile(mode="reduce-overhead")``) replays all of
them as one. A graph has fixed shapes, and lookahead steps change shape twice over: the draft
tree's size varies and the KV cache grows. `CompiledDecoder` removes both:

* every step feeds the same (N-1)(W+G) tokens: the window and the tree, padded with dummies
  that nothing sees (`ladref.static.pad_step`), so ids, positions and mask keep one shape;
* the KV cache is preallocated (`ladref.static.StaticRunner`): a step writes its tokens into the
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

import time

import torch

from .call import DecodeCall
from .config import LookaheadConfig, check_int
from .greedy import run_greedy
from .lookahead import LookaheadProposer
from .results import DecodeResult
from .runner import check_model
from .static import MODES as RUNNER_MODES
from .static import StaticRunner, check_mode
from .step import run_drafting
from .types import EosIds, Streamer, TokenIds, Tokenizer

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
            `ladref.static.StaticRunner` compile mode: "reduce-overhead" (CUDA graphs, CUDA only),
            "max-autotune" (frozen weights, Inductor's max-autotune GEMM templates) or "default";
            None runs the constant-shape path without compiling.
        attention_backend: SDPA kernel choice (`ladref.kernels.sdpa_backends`).

    Attributes:
        capture_s: seconds the one-time compilation and capture took (`warmup`), None before it.

    Example:
        >>> decoder = CompiledDecoder(model, LookaheadConfig(15, 5, 15), max_length=1024)
        >>> decoder.warmup()                      # compile and capture: once
        >>> result = decoder(ids, 256)            # every call after replays the captured step
    """

    def __init__(self, model: torch.nn.Module, config: LookaheadConfig | None = None, *, max_length: int,
                 mode: str | None = "auto", attention_backend: str = "auto") -> None:
        if config is not None and not isinstance(config, LookaheadConfig):
            raise TypeError(f"config must be a LookaheadConfig or None, got {type(config).__name__}")
        check_int("max_length", max_length, 2)
        check_model(model)
        self.mode = resolve_mode(mode, next(model.parameters()).device)
        self.model, self.config = model, config
        slots = 1 if config is None else config.ngram_size
        self.step_tokens = 1 if config is None else config.max_step_tokens()
        self.runner = StaticRunner(model, max_length, attention_backend, self.mode, commit_slots=slots, step_width=self.step_tokens)
        self.capture_s: float | None = None

    @property
    def method(self) -> str:
        """"compiled_greedy" or "compiled_lookahead"."""
        return "compiled_greedy" if self.config is None else "compiled_lookahead"

    def warmup(self) -> float:
        """Compile and capture the step (three short calls on a dummy prompt); returns `capture_s`.

        Timed separately from decoding: the cost is paid once per decoder, whatever the calls.
        """
        if self.capture_s is None:
            start = time.perf_counter()
            prompt = torch.arange(4) % self.model.get_input_embeddings().num_embeddings
            for _ in range(3):  # compile; record the graphs; replay once
                self._decode(prompt, 2 * (self.config.ngram_size if self.config else 2), [], None, None)
            self.capture_s = time.perf_counter() - start
        return self.capture_s

    def __call__(self, input_ids: TokenIds, max_new_tokens: int = 64, *, eos_token_id: EosIds = None,
                 tokenizer: Tokenizer | None = None, streamer: Streamer | None = None) -> DecodeResult:
        """Decode one prompt; output identical to `greedy_decode` (exactly in float32 / float64).

        The first call runs `warmup` first; its cost is in `capture_s`, not in this call's
        ``stats.wall_time_s``.

        Args:
            input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
            max_new_tokens: most tokens to generate.
            eos_token_id: id(s) to stop at (kept in the output); default: the model's.
            tokenizer: optional, to decode the text.
            streamer: optional transformers streamer; gets the prompt, each token in order, then `end()`.

        Returns:
            `DecodeResult` with method "compiled_greedy" or "compiled_lookahead"; a lookahead
            step's ``forward_tokens_per_step`` counts its real tokens; the padded step computes
            (N-1)(W+G) (`step_tokens`).
        """
        self.warmup()
        return self._decode(input_ids, max_new_tokens, eos_token_id, tokenizer, streamer)

    @torch.inference_mode()
    def _decode(self, input_ids, max_new_tokens, eos_token_id, tokenizer, streamer) -> DecodeResult:
        extent = self.step_tokens if self.config is None else max(self.step_tokens, self.config.ngram_size)
        call = DecodeCall.begin(self.model, input_ids, max_new_tokens, extent, eos_token_id, tokenizer, streamer,
                                runner=self.runner)
        need = call.prompt.shape[0] + max_new_tokens + extent
        if need > self.runner.max_length:
            raise ValueError(f"prompt ({call.prompt.shape[0]}) + max_new_tokens ({max_new_tokens}) + step width ({extent}) = "
                             f"{need} exceeds this decoder's max_length {self.runner.max_length}")
        if self.config is None:
            run_greedy(self.runner, call.prompt, call.sink, call.stats)
        else:
            run_drafting(self.runner, call.prompt, [LookaheadProposer(self.config)], call.sink, call.stats)
        return call.finish(tokenizer, self.method)
