"""Inductor's C++ GEMM for a few rows, and the settings that might make 8 rows cost what 1 costs.

A stack of 8 MLP blocks of SmolLM2-135M's shape (576 -> 1536 gate and up, 1536 -> 576 down, SiLU;
85 MB of float32 weights, more than this CPU's 32 MB L3) is exported with its rows a dynamic
dimension and compiled ahead of time as ladref's packages are (frozen weights, max-autotune, C++
GEMM templates). First: the package's time for 1 to 16 rows against eager. Then one package per
setting, each built for 8 rows: Inductor's thread split (M, N, K factors), K slices, cache
blocking, the grouped GEMM template, ATen's GEMM, and the product taken as W @ x^T.
Medians of 21 calls after 3; GB/s is the weights read over the time.

    python benchmarks/results/step_breakdown/compiled_gemm_knobs.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
BASE = {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}  # ladref.fast.precompiled's
SETTINGS = {  # name: (Inductor settings added to BASE, linear as W @ x^T)
    "as built (C++ GEMM)": ({}, False),
    "threads 1,2,1 (split N)": ({"cpp.gemm_thread_factors": "1,2,1"}, False),
    "threads 2,1,1 (split M)": ({"cpp.gemm_thread_factors": "2,1,1"}, False),
    "threads 1,1,2 (split K)": ({"cpp.gemm_thread_factors": "1,1,2"}, False),
    "K slices 2": ({"cpp.gemm_max_k_slices": 2}, False),
    "cache blocking 2,1,576": ({"cpp.gemm_cache_blocking": "2,1,576"}, False),
    "grouped GEMM template": ({"cpp.enable_grouped_gemm_template": True}, False),
    "ATen GEMM": ({"max_autotune_gemm_backends": "ATEN"}, False),
    "W @ x^T, ATen or C++": ({"max_autotune_gemm_backends": "ATEN,CPP"}, True),
}


class Block(torch.nn.Module):
    def __init__(self, transposed: bool) -> None:
        super().__init__()
        self.transposed = transposed
        self.gate, self.up = (torch.nn.Linear(576, 1536, bias=False) for _ in range(2))
        self.down = torch.nn.Linear(1536, 576, bias=False)

    def linear(self, layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(layer.weight, x.t()).t() if self.transposed else layer(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (rows, 576)
        return x + self.linear(self.down, F.silu(self.linear(self.gate, x)) * self.linear(self.up, x))


def stack(transposed: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(Block(transposed) for _ in range(8))).eval().requires_grad_(False)


def median_ms(fn, x: torch.Tensor) -> float:
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(21):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def package(model: torch.nn.Module, settings: dict, folder: Path, dynamic: bool):
    """`model` exported (rows dynamic 1..64, or 8 rows) and compiled ahead of time with `settings`, loaded."""
    example = torch.randn(8, 576)
    shapes = ({0: torch.export.Dim("rows", min=1, max=64)},) if dynamic else None
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=shapes, strict=True)
        path = str(folder / f"p{len(list(folder.iterdir()))}.pt2")
        torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs=dict(BASE, **settings))
    return torch._inductor.aoti_load_package(path)


def main() -> None:
    megabytes = 8 * 3 * 576 * 1536 * 4 / 1e6
    print(f"# {__doc__.splitlines()[0]}\n# {megabytes:.0f} MB of weights, 2 threads, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        model = stack(False)
        built = package(model, {}, Path(folder), dynamic=True)
        print("one package, rows dynamic: ms (GB/s), eager beside it")
        for rows in (1, 2, 3, 4, 6, 8, 16):
            x = torch.randn(rows, 576)
            ms, eager = median_ms(built, x), median_ms(model, x)
            print(f"  rows {rows:2d}: package {ms:5.2f} ms ({megabytes / ms:4.1f} GB/s)   eager {eager:5.2f} ms")
        x = torch.randn(8, 576)
        print("8 rows, one package per setting: ms (GB/s)")
        for name, (settings, transposed) in SETTINGS.items():
            model = stack(transposed)
            built = package(model, settings, Path(folder), dynamic=False)
            gap = float((built(x) - model(x)).abs().max())
            ms = median_ms(built, x)
            print(f"  {name:26s} {ms:5.2f} ms ({megabytes / ms:4.1f} GB/s)   largest difference from eager {gap:.1e}")


if __name__ == "__main__":
    main()
