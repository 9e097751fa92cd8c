"""A compiled step attending over every slot of its static cache against over the slots it uses (`StaticRunner.span`).

One package of the 1,024-slot step of float32 SmolLM2-135M (widths 1..64 and the span dynamic,
max-autotune), built or loaded from DIR, bound to one runner's cache. A step of q tokens at kv
cached tokens is run twice in turns, the same program: once attending over all 1,024 slots (the
unused ones masked, as every step did before), once over the first kv + q. Widths and lengths
interleaved, median of the rounds; the two runs' logits are compared at every step.

    python benchmarks/results/compiled_cpu/span_ab.py DIR
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from ladref import load_default_model
from ladref.fast.static import StaticRunner
from ladref.results import DecodeStats

KVS, WIDTHS, MAX_LENGTH = (128, 512, 896), (1, 2, 4, 8, 16), 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compile_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, _ = load_default_model("cpu")
    runner = StaticRunner(model, MAX_LENGTH, compile_mode="max-autotune", compile_dir=args.compile_dir)
    start = time.perf_counter()
    runner.compile([1])  # the package: one program for every width
    print(f"# package {'loaded' if runner.from_disk[1] else 'built'} in {time.perf_counter() - start:.0f} s; cuts: {runner.cuts()}")
    step = runner._steps[1]
    runner.prefill(torch.arange(max(KVS) + 1) % 1000 + 100, DecodeStats())  # caches max(KVS) tokens (eager)
    times, gap, flips = {(s, kv, q): [] for s in ("all", "used") for kv in KVS for q in WIDTHS}, 0.0, 0
    with torch.inference_mode(), runner.attending():
        for round_ in range(args.rounds + 2):
            for kv in KVS:
                for q in WIDTHS:
                    logits = {}
                    for span, n in (("all", MAX_LENGTH), ("used", kv + q)):
                        inputs = (torch.arange(q) + 7, torch.arange(kv, kv + q), torch.ones(q, q, dtype=torch.bool).tril_(),
                                  torch.tensor(kv), torch.arange(n))
                        begin = time.perf_counter()
                        logits[span] = step(runner, *inputs)  # (q, V); writes slots kv .. kv+q-1, the same in both
                        seconds = time.perf_counter() - begin
                        if round_ >= 2:  # two rounds to warm up
                            times[span, kv, q].append(1e3 * seconds)
                    gap = max(gap, float((logits["all"] - logits["used"]).abs().max()))
                    flips += int((logits["all"].argmax(-1) != logits["used"].argmax(-1)).sum())
    print(f"# {__doc__.splitlines()[0]}")
    print(f"# {MAX_LENGTH} slots, 2 threads, {args.rounds} rounds in turns after 2, median (min-max) ms per step; "
          f"torch {torch.__version__}")
    for kv in KVS:
        for q in WIDTHS:
            every, used = (statistics.median(times[s, kv, q]) for s in ("all", "used"))
            spread = ", ".join(f"{s} {min(times[s, kv, q]):.1f}-{max(times[s, kv, q]):.1f}" for s in ("all", "used"))
            print(f"kv {kv:4d} width {q:2d}: all slots {every:6.1f}  used {used:6.1f}  used/all {used / every:.3f}   ({spread})")
    print(f"largest logit difference between the two: {gap:.2e}; argmax differs at {flips} positions")


if __name__ == "__main__":
    main()
