"""Peak memory of one call: CUDA's allocator peak, or Linux's resident high-water mark, reset before the call."""

from __future__ import annotations

import resource
from pathlib import Path

import torch

_CLEAR_REFS, _STATUS = Path("/proc/self/clear_refs"), Path("/proc/self/status")


def reset_peak(device: torch.device) -> float:
    """Start a call's peak afresh: CUDA's allocator statistics, or Linux's resident high-water mark.

    Returns:
        The memory held now, MiB (CUDA: allocated; a CPU: the resident set, Linux; else 0): a call's
        peak less this is what the call itself added.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    if _CLEAR_REFS.exists():
        try:
            _CLEAR_REFS.write_text("5")  # 5: reset the peak resident set size to the current one (Linux >= 4.0)
        except OSError:
            return 0.0
        return resident_mib()
    return 0.0


def _status_mib(field: str) -> float:
    """A field of /proc/self/status ("VmRSS:", "VmHWM:"), MiB; 0 where there is none."""
    if _STATUS.exists():
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def resident_mib() -> float:
    """The process's resident set now, MiB (Linux's VmRSS; 0 where /proc has none)."""
    return _status_mib("VmRSS:")


def peak_mib(device: torch.device) -> float:
    """CUDA: max allocated since the last reset; a CPU: the resident high-water mark since then (Linux's
    VmHWM, never below the resident set now; elsewhere the process's max RSS, which is never reset)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if _STATUS.exists():
        return max(_status_mib("VmHWM:"), resident_mib())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
