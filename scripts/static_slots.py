"""Step time of a StaticRunner against its cache length: every compiled step attends over all M slots.

The source of the cache-length figures in docs/compiled.md (log in
benchmarks/archive/compiled_cpu/static_slots.log); 25 steps of w tokens after 100 cached ones:

    python scripts/static_slots.py none 256,512,1536 1,8
    python scripts/static_slots.py max-autotune 512,1536 1,8
"""

import sys
import time

import torch

from ladref import load_default_model
from ladref.fast.static import StaticRunner

torch.set_num_threads(2)
model, _ = load_default_model()
mode = None if sys.argv[1] == "none" else sys.argv[1]
for slots in map(int, sys.argv[2].split(",")):
    for width in map(int, sys.argv[3].split(",")):
        runner = StaticRunner(model, slots, compile_mode=mode, widths=(width,))
        start = time.perf_counter()
        runner.compile()
        compile_s = time.perf_counter() - start
        ids, times = torch.arange(width) + 100, []
        for _ in range(25):
            runner.length = 100  # the same 100 cached tokens before every step
            start = time.perf_counter()
            runner.forward(ids)
            times.append(time.perf_counter() - start)
        times.sort()
        print(f"mode {mode} M {slots} w {width}: compile {compile_s:.0f}s, step median {1000 * times[12]:.1f} ms "
              f"min {1000 * times[0]:.1f}", flush=True)
