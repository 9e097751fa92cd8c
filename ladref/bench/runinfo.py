"""What a results file records about its run: the machine, the versions, the command, the commit,
and where results go by default."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers

from ..pricing.timing import processor


def default_out() -> Path:
    """A fresh results folder, ``runs/bench-YYYYmmdd-HHMMSS`` (never the committed ``benchmarks/results``)."""
    return Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S")


def machine(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name and torch's thread count."""
    name = processor(device)
    return name if device.type == "cuda" else f"{name}, {torch.get_num_threads()} torch threads"


def git_commit() -> str | None:
    """The ladref checkout's commit ("+ changes" when tracked files differ from it); None outside a git checkout.

    Results under ``benchmarks/results/`` are not code: the results an earlier benchmark of the same
    ``benchmarks/current.py run`` wrote there do not make a later one's commit unclean.
    """
    folder = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                ":(top,exclude)benchmarks/results"], cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" + changes" if dirty.stdout.strip() else "")


def run_meta(model: torch.nn.Module) -> dict:
    """The command line, device, machine, dtype, torch / transformers versions and git commit."""
    device = next(model.parameters()).device
    return {"command": "python -m ladref " + " ".join(sys.argv[1:]), "device": str(device), "machine": machine(device),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "torch": torch.__version__,
            "transformers": transformers.__version__, "git_commit": git_commit()}
