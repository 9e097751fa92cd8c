"""Where a compiled step's time goes: every kernel of an AOTInductor package clocked (float32 SmolLM2-135M, CPU).

The package is built as `ladref.fast.static.StaticRunner` builds its own (max-autotune, frozen and
packed weights, widths 1..64 in one program), with Inductor's kernel profiling switched on
(``cpp.enable_kernel_profile``): each generated kernel then reports itself to ``torch.profiler``.
Such a package is not the library's, and its file name does not say so, so it is built in a folder
of its own (`--compile-dir`, a fresh temporary folder by default), never a decoder's `compile_dir`.

A step of q tokens at 512 cached tokens (the runner's own `forward`, as `ladref.pricing.timing.measure_steps`
runs it) is timed without the profiler, then run under it; kernel times are summed per part (each
GEMM by its shape, the rest by the operations Inductor fused into it) and set beside the least
time this machine allows the part, max(bytes read / bandwidth, FLOPs / GEMM rate), both measured
in the same run (`scripts/step_breakdown.py`'s `machine_roofline`). The runner's own operations
around the package (its inputs, the mask, the logits it picks) are clocked as ATen operations;
what nothing clocks, the step's wall time less everything clocked, is the package's wrapper and
the threads' start and join around each kernel.

    python scripts/compiled_breakdown.py --out benchmarks/archive/step_breakdown

Every timing: medians over interleaved repeats.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from ladref import load_default_model
from ladref.fast.static import StaticRunner
from ladref.results import DecodeStats

sys.path.insert(0, str(Path(__file__).parent))
from step_breakdown import machine_roofline, save  # noqa: E402  (a sibling script)

KV, WIDTHS = 512, (1, 2, 3, 4, 8)
# a kernel's part, from the operations in its name (the first that matches); GEMMs by their shape (`gemm_part`)
PARTS = (("rotary embedding, cache write, mask, and the key/value heads copied per query head (`repeat_kv`)", ("clone_cos_expand",)),
         ("rotary embedding, cache write, mask", ("index_copy", "cos", "masked_fill")),
         ("attention core (SDPA)", ("scaled_dot_product",)),
         ("norms", ("rsqrt",)),
         ("other kernels (residuals, embedding, ...)", ("cpp_fused", "aoti_torch")))
HOST = "the runner's own operations (inputs, mask, picked logits)"


def gemm_part(name: str, config) -> str | None:
    """The projection a GEMM kernel computes (from the "n<N>k<K>" in its name), None if `name` is no GEMM."""
    shape = re.search(r"gemm_m\w*?n(\d+)k(\d+)", name)
    if shape is None:
        return None
    n, k = map(int, shape.groups())
    d, ff, kv = config.hidden_size, config.intermediate_size, config.num_key_value_heads * config.hidden_size // config.num_attention_heads
    return {(ff, d): "MLP gate, up", (d, ff): "MLP down", (d, d): "attention q, o", (kv, d): "attention k, v",
            (config.vocab_size, d): "output head"}.get((n, k), f"GEMM n{n} k{k}")


def part_of(name: str, config) -> str:
    """The part of a step a profiled event belongs to: the package's kernels (its generated ones, and
    the ATen kernels it calls, ``aoti_torch_*``), or the runner's own operations (``aten::*``)."""
    gemm = gemm_part(name, config)
    if gemm is not None:
        return gemm
    return next((part for part, words in PARTS if any(w in name for w in words)), HOST)


def least_ms(config, q: int, bandwidth: float, gemm: float) -> dict[str, float]:
    """Each GEMM part's least time: its weights read once, or its FLOPs at the measured GEMM rate."""
    d, ff, layers, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    kv = config.num_key_value_heads * d // config.num_attention_heads
    weights = {"MLP gate, up": 2 * ff * d * layers, "MLP down": d * ff * layers, "attention q, o": 2 * d * d * layers,
               "attention k, v": 2 * kv * d * layers, "output head": v * d}
    return {part: 1e3 * max(4 * n / bandwidth, 2 * n * q / gemm) for part, n in weights.items()}


def step(runner: StaticRunner, q: int) -> None:
    """Roll the cache back to KV tokens, then one forward pass of q tokens under a causal mask."""
    runner.commit(KV - 1, torch.tensor([0]))
    runner.forward(torch.arange(q), allowed=torch.ones(q, q, dtype=torch.bool).tril_())


def wall_ms(runner: StaticRunner, repeats: int) -> dict[int, float]:
    """Median wall time of a step per width, widths interleaved, no profiler."""
    samples = defaultdict(list)
    for _ in range(repeats):
        for q in WIDTHS:
            runner.commit(KV - 1, torch.tensor([0]))
            start = time.perf_counter()
            runner.forward(torch.arange(q), allowed=torch.ones(q, q, dtype=torch.bool).tril_())
            samples[q].append(1e3 * (time.perf_counter() - start))
    return {q: statistics.median(s) for q, s in samples.items()}


def kernel_ms(runner: StaticRunner, q: int, repeats: int, config) -> dict[str, float]:
    """Per part, the kernels' time of one step of q tokens (mean over `repeats` profiled steps)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            step(runner, q)
    parts = defaultdict(float)
    for event in prof.events():
        caller = event  # an ATen operation inside a kernel the package calls counts as that kernel's
        while caller.cpu_parent is not None and not caller.name.startswith("aoti_torch_"):
            caller = caller.cpu_parent
        name = caller.name if caller.name.startswith("aoti_torch_") else event.name
        parts[part_of(name, config)] += event.self_cpu_time_total / 1e3 / repeats
    return dict(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-dir", default=None, help="a folder for the profiled package only (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None, help="folder for compiled_breakdown.json and .md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, _ = load_default_model("cpu")
    config = model.config
    folder = args.compile_dir or tempfile.mkdtemp(prefix="ladref-profiled-")
    with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
        runner = StaticRunner(model, 1024, compile_mode="max-autotune", compile_dir=folder)
        print(f"package built or loaded in {runner.compile():.0f} s ({folder})", flush=True)
    runner.prefill(torch.arange(KV + 2) % config.vocab_size, DecodeStats())
    for q in WIDTHS:
        step(runner, q)  # loads each width once
    bandwidth, gemm = machine_roofline()
    print(f"this machine now: memory reads {bandwidth / 1e9:.1f} GB/s, fp32 GEMM {gemm / 1e9:.0f} GFLOP/s", flush=True)
    walls = wall_ms(runner, args.repeats)
    kernels = {q: kernel_ms(runner, q, args.repeats, config) for q in WIDTHS}
    bounds = {q: least_ms(config, q, bandwidth, gemm) for q in WIDTHS}
    names = sorted({p for k in kernels.values() for p in k} - {HOST}, key=lambda p: -kernels[WIDTHS[0]].get(p, 0)) + [HOST]
    lines = ["| part | " + " | ".join(f"q={q}" for q in WIDTHS) + " | least, q=1 |", "|---" * (len(WIDTHS) + 2) + "|"]
    for part in names:
        bound = bounds[WIDTHS[0]].get(part)
        lines.append(f"| {part} | " + " | ".join(f"{kernels[q].get(part, 0):.2f}" for q in WIDTHS) + " | "
                     + ("" if bound is None else f"{bound:.2f}") + " |")
    lines.append("| everything clocked | " + " | ".join(f"{sum(kernels[q].values()):.2f}" for q in WIDTHS) + " | |")
    lines.append("| not clocked: the package's wrapper, the threads' start and join | " + " | ".join(
        f"{walls[q] - sum(kernels[q].values()):.2f}" for q in WIDTHS) + " | |")
    lines.append("| **whole step (wall, no profiler)** | " + " | ".join(f"**{walls[q]:.2f}**" for q in WIDTHS) + " | "
                 + f"{sum(bounds[WIDTHS[0]].values()):.2f} |")
    meta = {"kv": KV, "repeats": args.repeats, "threads": 2, "bandwidth_bytes_per_s": bandwidth, "gemm_flops_per_s": gemm,
            "torch": torch.__version__, "widths": WIDTHS}
    save(args.out, "compiled_breakdown", "\n".join(lines), {"meta": meta, "kernel_ms": kernels, "wall_ms": walls, "least_ms": bounds})


if __name__ == "__main__":
    main()
