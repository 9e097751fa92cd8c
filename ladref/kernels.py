"""Which SDPA attention kernels a forward pass may use: a scoped choice, never a global setting.

A lookahead step has a new (q, past + q) shape at every step. On CUDA, torch's default SDPA
dispatch picks cuDNN attention for a float mask, and cuDNN builds an execution plan for every new
shape (measured on an H200: 87-123 ms for a forward with a new shape, 32 ms for a repeated one),
so a decoder whose shapes never repeat never gets warm. ladref's runners therefore run every
forward inside ``torch.nn.attention.sdpa_kernel(...)`` with a choice that plans nothing per
shape (docs/attention_kernels.md). This module only uses torch.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ATTENTION_BACKENDS = ("auto", "torch", "efficient", "math", "flash", "cudnn")
KERNELS = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
           "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
# SDPA kernels that take an arbitrary float mask and plan nothing per shape, by device type, best first
AUTO_KERNELS = {"cuda": ("efficient", "math"), "cpu": ("flash", "math")}
MASKED_KERNELS = {"cuda": ("efficient", "cudnn", "math"), "cpu": ("flash", "math")}


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
