"""The decoders a benchmark compares, each with its one-time set-up (compilation, capture, first call).

* ``greedy``, ``jacobi``, ``lookahead``: ladref's eager decoders (one row per lookahead config);
* ``compiled_greedy``, ``compiled_lookahead``: `ladref.CompiledDecoder`, constant-shape steps
  over a static cache, captured once (``torch.compile(mode="reduce-overhead")``);
* ``generate``, ``generate_static``, ``plookup``: transformers' ``generate()`` greedy, with a
  static cache (which transformers compiles itself on CUDA), and prompt lookup
  (`ladref.bench.hf`), run with transformers' own attention dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..compiled import CompiledDecoder
from ..config import LookaheadConfig
from ..greedy import greedy_decode
from ..jacobi import jacobi_decode
from ..lookahead import lookahead_decode
from ..results import DecodeResult
from .hf import generate_decode, prompt_lookup_decode

METHODS = ("greedy", "generate", "generate_static", "plookup", "jacobi", "lookahead", "compiled_greedy", "compiled_lookahead")
Decoder = Callable[[torch.nn.Module, torch.Tensor, int], DecodeResult]


def config_label(config: LookaheadConfig) -> str:
    """"W/N/G", e.g. "15/5/15"."""
    return f"{config.window_size}/{config.ngram_size}/{config.max_candidates}"


@dataclass(frozen=True)
class BenchMethod:
    """One row of a benchmark.

    Attributes:
        label: the row's name ("lookahead 15/5/15", "compiled_greedy", ...).
        flops_kind: how `ladref.bench.flops.decode_flops` charges its steps.
        config: its lookahead config, or None.
        run: decodes one prompt: ``run(model, ids, max_new_tokens)``.
        warm: the one-time set-up, timed apart from decoding: ``warm(model, prompts, max_new_tokens)``.
    """

    label: str
    flops_kind: str
    config: LookaheadConfig | None
    run: Decoder
    warm: Callable[[torch.nn.Module, Sequence[torch.Tensor], int], None]


def _first_call(run: Decoder) -> Callable:
    return lambda model, prompts, n: run(model, prompts[0], min(8, n))


def _longest_call(run: Decoder) -> Callable:
    """transformers' static cache is sized by the longest call; compile for it before timing."""
    def warm(model, prompts, n):
        longest = max(prompts, key=lambda p: p.numel())
        for _ in range(2):
            run(model, longest, n)
    return warm


def _compiled(model, config, max_length, mode, backend) -> BenchMethod:
    decoder = CompiledDecoder(model, config, max_length=max_length, mode=mode, attention_backend=backend)
    label = "compiled_greedy" if config is None else f"compiled_lookahead {config_label(config)}"
    kind = "greedy" if config is None else "lookahead"
    return BenchMethod(label, kind, config, lambda m, ids, n: decoder(ids, n), lambda m, prompts, n: decoder.warmup())


def bench_methods(methods: Sequence[str], configs: Sequence[LookaheadConfig], model: torch.nn.Module, max_length: int, *,
                  block_size: int, lookup_tokens: int, attention_backend: str, compile_mode: str | None) -> list[BenchMethod]:
    """The rows for `methods` (lookahead ones once per config), in order."""
    backend, rows = attention_backend, []
    for method in methods:
        if method == "greedy":
            run = lambda m, ids, n: greedy_decode(m, ids, n, attention_backend=backend)  # noqa: E731
            rows.append(BenchMethod("greedy", "greedy", None, run, _first_call(run)))
        elif method in ("generate", "generate_static"):
            cache = "static" if method == "generate_static" else None
            run = lambda m, ids, n, cache=cache: generate_decode(m, ids, n, cache_implementation=cache)  # noqa: E731
            rows.append(BenchMethod(method, "greedy", None, run, _longest_call(run) if cache else _first_call(run)))
        elif method == "plookup":
            run = lambda m, ids, n: prompt_lookup_decode(m, ids, n, prompt_lookup_num_tokens=lookup_tokens)  # noqa: E731
            rows.append(BenchMethod("plookup", "plookup", None, run, _first_call(run)))
        elif method == "jacobi":
            run = lambda m, ids, n: jacobi_decode(m, ids, n, block_size=block_size, attention_backend=backend)  # noqa: E731
            rows.append(BenchMethod("jacobi", "jacobi", None, run, _first_call(run)))
        elif method == "lookahead":
            for c in configs:
                run = lambda m, ids, n, c=c: lookahead_decode(m, ids, n, config=c, attention_backend=backend)  # noqa: E731
                rows.append(BenchMethod(f"lookahead {config_label(c)}", "lookahead", c, run, _first_call(run)))
        elif method == "compiled_greedy":
            rows.append(_compiled(model, None, max_length, compile_mode, backend))
        else:
            rows += [_compiled(model, c, max_length, compile_mode, backend) for c in configs]
    return rows
