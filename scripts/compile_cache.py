"""What a second process pays to compile one width, and why: Inductor's cache counters, with and without weight prepacking.

The source of the compile-cache paragraph in docs/compiled.md (log in
benchmarks/archive/compiled_cpu/compile_cache.log). Run each line twice: the second run finds
Inductor's on-disk caches warm, as a second process would.

    python scripts/compile_cache.py prepack
    python scripts/compile_cache.py no-prepack
    python scripts/compile_cache.py package ~/.cache/ladref/steps   # an AOTInductor package (compile_dir)
"""

import sys
import time

import torch
from torch._dynamo.utils import compilation_time_metrics, counters

from ladref import load_default_model
from ladref.fast.static import StaticRunner

torch.set_num_threads(2)
model, _ = load_default_model()
prepack = sys.argv[1] != "no-prepack"
compile_dir = sys.argv[2] if sys.argv[1] == "package" else None
runner = StaticRunner(model, 512, compile_mode="max-autotune", widths=(1,), compile_dir=compile_dir)
start = time.perf_counter()
with torch._inductor.config.patch({"cpp.weight_prepack": prepack}):  # scoped; the runner adds freezing inside
    runner.compile()
compile_s = time.perf_counter() - start
ids, times = torch.tensor([100]), []
for _ in range(25):
    runner.length = 100  # the same 100 cached tokens before every step
    start = time.perf_counter()
    runner.forward(ids)
    times.append(time.perf_counter() - start)
times.sort()
inductor = counters["inductor"]
print(f"{sys.argv[1]}, weight_prepack={prepack}: compile {compile_s:.1f} s, step median {1000 * times[12]:.1f} ms; "
      f"FX graph cache hit {inductor['fxgraph_cache_hit']} miss {inductor['fxgraph_cache_miss']} "
      f"bypass {inductor['fxgraph_cache_bypass']}; C++ GEMM template kernels {inductor['cpp_templated_kernel_counter']}",
      flush=True)
if compile_dir is not None:
    print(f"  package found on disk: {runner.from_disk[1]}")
seconds = compilation_time_metrics  # {phase: [seconds per compilation]}
print(f"  of which Dynamo tracing {sum(seconds.get('bytecode_tracing', [0])):.1f} s, Inductor lowering and code "
      f"generation {sum(seconds.get('fx_codegen_and_compile', [0])):.1f} s")
