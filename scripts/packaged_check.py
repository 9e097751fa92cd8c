"""Compiled decoding from AOTInductor packages (`compile_dir`) against `torch.compile`, on Spec-Bench prompts.

The source of the package figures in docs/compiled.md (logs in benchmarks/archive/compiled_cpu/).
Each run: compile (or load) once, then decode the first prompt of each task that fits a
512-slot cache (with 128 new tokens and a 64-token step), 128 new tokens, against eager `greedy_decode` (time ratio, identical output).
Run with a package folder twice: the first run builds the packages, the second loads them.

    python scripts/packaged_check.py greedy torch
    python scripts/packaged_check.py greedy ~/.cache/ladref/steps
    python scripts/packaged_check.py adaptive ~/.cache/ladref/steps
"""

import sys
import time

import torch

from ladref import CompiledAdaptiveDecoder, CompiledDecoder, greedy_decode, load_default_model
from ladref.bench.datasets import SPECBENCH_TASKS, specbench_prompts
from ladref.models import chat_ids

torch.set_num_threads(2)
model, tokenizer = load_default_model()
method, where = sys.argv[1], sys.argv[2]
compile_dir = None if where == "torch" else where
if method == "greedy":
    decoder = CompiledDecoder(model, None, max_length=512, mode="max-autotune", compile_dir=compile_dir)
    runners = [decoder.runner]
else:
    decoder = CompiledAdaptiveDecoder(model, max_lengths=512, mode="max-autotune", compile_dir=compile_dir)
    runners = decoder.runners
start = time.perf_counter()
decoder.warmup()
print(f"{method} {where}: warmup {time.perf_counter() - start:.1f} s; loaded from disk "
      f"{[r.from_disk for r in runners]}", flush=True)
encoded = [(p.task, chat_ids(tokenizer, p.text)) for p in specbench_prompts()]
total = [0.0, 0.0]
for task in SPECBENCH_TASKS:
    fitting = [ids for t, ids in encoded if t == task and ids.shape[1] + 128 + 64 <= 512]  # + the widest step
    if not fitting:
        print(f"  {task}: no prompt fits a 512-slot cache", flush=True)
        continue
    ids = fitting[0]
    eager = greedy_decode(model, ids, 128)
    result = decoder(ids, 128)
    total[0] += eager.stats.wall_time_s
    total[1] += result.stats.wall_time_s
    print(f"  {task} ({ids.shape[1]} prompt tokens): greedy {eager.stats.wall_time_s:.2f} s, {method} "
          f"{result.stats.wall_time_s:.2f} s, {eager.stats.wall_time_s / result.stats.wall_time_s:.2f}x, "
          f"S {result.stats.compression:.2f}, identical {result.token_ids == eager.token_ids}", flush=True)
print(f"  overall {total[0] / total[1]:.2f}x", flush=True)
