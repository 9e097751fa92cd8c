"""Which kernels a forward pass uses for attention and for small linear layers: scoped choices, never globals.

A lookahead step has a new (q, past + q) shape at every step. On CUDA, torch's default SDPA
dispatch picks cuDNN attention for a float mask, and cuDNN builds an execution plan for every new
shape (measured on an H200: 87-123 ms for a forward with a new shape, 32 ms for a repeated one),
so a decoder whose shapes never repeat never gets warm. ladref's runners therefore run every
forward inside ``torch.nn.attention.sdpa_kernel(...)`` with a choice that plans nothing per
shape (docs/attention_kernels.md).

On a CPU, torch's BLAS computes ``F.linear(x, W)`` = x @ W^T over a few rows badly: 2 or 3 rows
as one matrix-vector product per row, each reading all of W, and 4 to 16 rows at about a third of
the memory bandwidth, while the same product taken as W @ x^T reads W once at full speed
(benchmarks/archive/step_breakdown/head_gemm.log); a whole pass gains, unevenly, up to 8 rows, and
from 10 to 15 rows W @ x^T is the slower (benchmarks/archive/step_breakdown/wide_rows/). One row is a
matrix-vector product however it is written, and is left to torch: taken as W @ [x; 0]^T (two
columns, the second zero) it was faster on one machine (step_breakdown/one_row/) and slower on two
others, quiet, under the measurement protocol (step_breakdown/kernels_ab.log, one_row_ab.log). A
pass of `SMALL_ROWS` rows therefore runs inside `linear_scope`, which computes every linear layer
that way. This module only uses torch.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

ATTENTION_BACKENDS = ("auto", "torch", "efficient", "math", "flash", "cudnn")
KERNELS = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
           "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
# SDPA kernels that take an arbitrary float mask and plan nothing per shape, by device type, best first
AUTO_KERNELS = {"cuda": ("efficient", "math"), "cpu": ("flash", "math")}
MASKED_KERNELS = {"cuda": ("efficient", "cudnn", "math"), "cpu": ("flash", "math")}
# the rows (B x q) of a CPU pass whose linear layers run as W @ x^T (`linear_scope`); measured faster there,
# net of the scope's own cost (step_breakdown/linears_ab.log; 6-16 rows: wide_rows/, 10-15 slower); one row as
# W @ [x; 0]^T: one-prompt greedy ran 1.07x faster without it (one_row_ab.log, kernels_ab.log), so a one-row pass is torch's
SMALL_ROWS = range(2, 9)


def check_attention_backend(choice: object) -> None:
    """Raise TypeError / ValueError unless `choice` is one of `ATTENTION_BACKENDS`."""
    if not isinstance(choice, str):
        raise TypeError(f"attention_backend must be a str, one of {ATTENTION_BACKENDS}, got {type(choice).__name__}")
    if choice not in ATTENTION_BACKENDS:
        raise ValueError(f"unknown attention_backend {choice!r}; choose one of {ATTENTION_BACKENDS}")


def sdpa_backends(choice: str, device: torch.device, attn_implementation: str | None) -> tuple[SDPBackend, ...] | None:
    """The SDPA kernels a model's forward passes may use, or None to leave torch's dispatch alone.

    Args:
        choice: "auto" (CUDA: memory-efficient, then math; CPU: torch's CPU flash kernel, then math),
            "torch" (torch's own per-call choice, e.g. cuDNN on CUDA, which plans every new shape),
            or one kernel: "efficient", "math", "flash", "cudnn".
        device: the model's device.
        attn_implementation: the model's ``config._attn_implementation`` ("sdpa" or "eager").

    Raises:
        TypeError, ValueError: an unknown choice, a choice for a model without SDPA attention, or a
            kernel that cannot take ladref's mask on this device (CUDA flash attention takes no mask).
    """
    check_attention_backend(choice)
    if attn_implementation != "sdpa":
        if choice != "auto":
            raise ValueError(f"attention_backend={choice!r} picks an SDPA kernel, but the model uses "
                             f"{attn_implementation!r} attention; load it with attn_implementation='sdpa'")
        return None
    if choice == "torch" or (choice == "auto" and device.type not in AUTO_KERNELS):
        return None
    if choice == "auto":
        return tuple(KERNELS[name] for name in AUTO_KERNELS[device.type])
    usable = MASKED_KERNELS.get(device.type, ("math",))
    if choice not in usable:
        why = "takes no attention mask" if choice == "flash" else "has no kernel"
        raise ValueError(f"attention_backend={choice!r}: SDPA {choice} attention {why} on {device.type}, and every "
                         f"ladref step needs a custom mask; use one of {('auto', 'torch') + usable}")
    return (KERNELS[choice],)


def attention_scope(kernels: tuple[SDPBackend, ...] | None) -> contextlib.AbstractContextManager:
    """``sdpa_kernel(kernels)`` as a context manager, or a no-op for None (eager attention, "torch")."""
    return sdpa_kernel(list(kernels)) if kernels else contextlib.nullcontext()


class SmallRowLinears(TorchFunctionMode):
    """Inside it, ``F.linear`` over `SMALL_ROWS` rows is computed as W @ x^T (`small_row_linear`).

    Every torch call made inside passes through ``__torch_function__``, which costs a few
    microseconds of Python each (a SmolLM2-135M pass makes a few thousand: about 7 ms on this
    CPU), so a pass enters the scope only where its linear layers gain more than that.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's protocol)
        kwargs = {} if kwargs is None else kwargs
        return small_row_linear(*args, **kwargs) if func is F.linear else func(*args, **kwargs)


def small_row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, for x of `SMALL_ROWS` rows computed as (W @ x^T)^T, contiguous.

    Args:
        x: (..., K) inputs, R rows in all; weight: (N, K) W; bias: (N,) or None.

    Returns:
        (..., N): equal to ``F.linear`` up to the rounding of another summation order.
    """
    rows = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    if weight.dim() != 2 or rows not in SMALL_ROWS:
        return F.linear(x, weight, bias)
    out = (weight @ x.reshape(rows, -1).T).T.contiguous()  # (R, N); left transposed, the layers after it run slower
    out = out.reshape(*x.shape[:-1], weight.shape[0])
    return out if bias is None else out + bias


def linear_scope(rows: int, enabled: bool) -> contextlib.AbstractContextManager:
    """`SmallRowLinears` for a pass of `rows` rows (B x q) in `SMALL_ROWS` where `enabled`, else a no-op."""
    return SmallRowLinears() if enabled and rows in SMALL_ROWS else contextlib.nullcontext()
