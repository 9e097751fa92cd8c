"""A compiled step with the key/value heads copied per query head (`repeat_kv`) against shared (`shared_kv_attention`).

Two packages of the same 1,024-slot step of float32 SmolLM2-135M (widths 1..64, max-autotune), one
built before `ladref.runner.shared_kv_scope` existed (a checkout of the commit before it), one
after, are loaded in one process and bound to one runner's cache (`ladref.fast.precompiled.load_package`).
A step of q tokens at 512 cached tokens is timed with each, in turns, widths interleaved; the
two packages' logits are compared on every step.

    python benchmarks/results/compiled_cpu/shared_kv_ab.py OLD.pt2 NEW.pt2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from ladref import load_default_model
from ladref.fast.precompiled import load_package
from ladref.fast.static import StaticRunner
from ladref.results import DecodeStats

KV, WIDTHS, MAX_LENGTH = 512, (1, 2, 4, 8, 16), 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the package built with repeat_kv")
    parser.add_argument("new", type=Path, help="the package built with shared key/value heads")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, _ = load_default_model("cpu")
    runner = StaticRunner(model, MAX_LENGTH, compile_mode="max-autotune")
    runner.prefill(torch.arange(KV + 1) % 1000 + 100, DecodeStats())  # caches KV tokens (eager), packs the cache
    steps = {name: load_package(path, runner) for name, path in (("repeat_kv", args.old), ("shared", args.new))}
    times, gap = {(name, q): [] for name in steps for q in WIDTHS}, 0.0
    for round_ in range(args.rounds + 2):
        for q in WIDTHS:
            logits = {}
            for name, step in steps.items():
                ids, positions = torch.arange(q) + 7, torch.arange(KV, KV + q)
                mask = torch.ones(q, q, dtype=torch.bool).tril_()
                start = time.perf_counter()
                logits[name] = runner._run(step, ids, positions, mask, q)  # writes slots KV.. KV+q-1, counts q
                seconds = time.perf_counter() - start
                runner.length = KV  # the step's slots are masked again: both packages see the same cache
                if round_ >= 2:  # two rounds to warm up
                    times[name, q].append(1e3 * seconds)
            gap = max(gap, float((logits["repeat_kv"] - logits["shared"]).abs().max()))
            same = torch.equal(logits["repeat_kv"].argmax(-1), logits["shared"].argmax(-1))
            assert same, f"width {q}: the packages' argmax differ"
    print(f"# {__doc__.splitlines()[0]}")
    print(f"# {MAX_LENGTH} slots, {KV} cached, 2 threads, {args.rounds} rounds in turns after 2, median (min, max) ms per step; "
          f"torch {torch.__version__}")
    for q in WIDTHS:
        old, new = (statistics.median(times[n, q]) for n in steps)
        spread = ", ".join(f"{n} {min(times[n, q]):.1f}-{max(times[n, q]):.1f}" for n in steps)
        print(f"width {q:2d}: repeat_kv {old:6.1f}  shared {new:6.1f}  shared/repeat_kv {new / old:.3f}   ({spread})")
    print(f"largest logit difference between the packages: {gap:.2e}; same argmax at every step")


if __name__ == "__main__":
    main()
