"""What a later process pays before the captured engine's first token, with Inductor's own on-disk caches.

The other side of docs/compiled.md's start-up table (whose package rows `scripts/compile_cache.py`
measures): `CapturedBatchDecoder` compiles the whole step (draft, forward, verify, commit) as one
program, and only Inductor's caches can spare a later process that work. Run each line twice with
the same ``TORCHINDUCTOR_CACHE_DIR``: the second run is the later process (log in
benchmarks/archive/compiled_cpu/captured_start.log).

    TORCHINDUCTOR_CACHE_DIR=/tmp/ind python scripts/captured_start.py max-autotune
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind python scripts/captured_start.py default
"""

import sys
import time

import torch
from torch._dynamo.utils import compilation_time_metrics, counters

from ladref import CapturedBatchDecoder, load_default_model

torch.set_num_threads(2)
mode = sys.argv[1]
model, _ = load_default_model()
prompt = list(range(100, 200))  # 100 tokens
start = time.perf_counter()
decoder = CapturedBatchDecoder(model, max_length=512, mode=mode, steps_per_read=1)
decoder([prompt], 4, eos_token_id=[])  # the first call compiles the one program (greedy: one shape)
start_s = time.perf_counter() - start
times = []
for _ in range(3):
    began = time.perf_counter()
    decoder([prompt], 32, eos_token_id=[])
    times.append((time.perf_counter() - began) / 32)
inductor, seconds = counters["inductor"], compilation_time_metrics
print(f"captured greedy, mode {mode}: first call {start_s:.1f} s, then {1000 * min(times):.1f} ms a token; "
      f"FX graph cache hit {inductor['fxgraph_cache_hit']} miss {inductor['fxgraph_cache_miss']} "
      f"bypass {inductor['fxgraph_cache_bypass']}; Dynamo tracing {sum(seconds.get('bytecode_tracing', [0])):.1f} s, "
      f"Inductor lowering and code generation {sum(seconds.get('fx_codegen_and_compile', [0])):.1f} s", flush=True)
