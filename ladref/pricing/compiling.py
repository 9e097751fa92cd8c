"""Compiling one step: the modes a `StaticRunner` knows, and how each width gets a graph of its own.

A mode is checked against the device before anything compiles (`check_mode`): CUDA graphs
("reduce-overhead") need a GPU, and a CPU compiles with Inductor, "max-autotune" with frozen
weights. The freezing is an Inductor setting, scoped to the compilation (`compile_scope`), never
set for the process. Each runner and width compiles a private copy of the step function
(`compile_own`), so one runner's graph, which holds its cache's buffers, serves no other.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Sequence

import torch

# torch.compile modes the runner knows; None runs the same padded steps without compiling
MODES = (None, "default", "reduce-overhead", "max-autotune")


def check_mode(mode: object, device: torch.device) -> None:
    """Raise a clear error unless `mode` is one of `MODES` and `device` can run it."""
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"compile mode must be a str or None, got {type(mode).__name__}")
    if mode not in MODES:
        raise ValueError(f"unknown compile mode {mode!r}; choose one of {MODES}")
    if mode == "reduce-overhead" and device.type != "cuda":
        raise ValueError(f"compile mode 'reduce-overhead' captures CUDA graphs, but the model is on {device.type}: "
                         "use 'max-autotune' (frozen weights, Inductor's CPU GEMM templates) or 'default'")


def check_widths(widths: object, max_length: int) -> tuple[int, ...]:
    """`widths` as a strictly increasing tuple of positive ints that fit in the cache, or a clear error."""
    if not isinstance(widths, Sequence) or not widths or not all(isinstance(w, int) and not isinstance(w, bool) for w in widths):
        raise TypeError(f"widths must be a non-empty sequence of ints, got {widths!r}")
    widths = tuple(widths)
    if widths[0] < 1 or any(a >= b for a, b in zip(widths, widths[1:])):
        raise ValueError(f"widths must be positive and strictly increasing, got {widths}")
    if widths[-1] > max_length:
        raise ValueError(f"width {widths[-1]} does not fit in the static cache's max_length {max_length}")
    return widths


def compile_scope(mode: str | None) -> contextlib.AbstractContextManager:
    """Inductor settings in force while a step compiles: frozen weights for "max-autotune", scoped, never global."""
    return torch._inductor.config.patch(freezing=True) if mode == "max-autotune" else contextlib.nullcontext()


def compile_own(fn: Callable, name: str, mode: str | None, device: torch.device) -> Callable:
    """`torch.compile` of a private copy of `fn` (mode None: `fn` itself, uncompiled).

    torch.compile keeps its graphs per *code object*, shared by every function made from it. The
    graphs hold this runner's cache buffers, guarded by identity (`guard_static_cache`), so a code
    object shared by many runners would recompile for each, up to Dynamo's recompile limit. A
    private copy per runner and width compiles once, its own graph, and no other runner's.
    """
    if mode is None:
        return fn
    own = types.FunctionType(fn.__code__.replace(co_name=name), fn.__globals__, name, fn.__defaults__, fn.__closure__)
    torch_mode = {"default": None, "max-autotune": "max-autotune" if device.type == "cuda" else "max-autotune-no-cudagraphs"}
    return torch.compile(own, mode=torch_mode.get(mode, mode), fullgraph=True, dynamic=False)
