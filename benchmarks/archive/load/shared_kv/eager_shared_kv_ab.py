"""A/B: an eager (dynamic-cache) pass with each key/value head copied per query head
(transformers' `repeat_kv`, what SDPA does for a masked pass of several tokens) against heads
shared inside SDPA (`ladref.runner.shared_kv_attention`). One process, the same model; the two
sides differ only in ``ModelFacts.shared_kv``, and alternate round by round.

    python benchmarks/results/load/shared_kv/eager_shared_kv_ab.py [ROUNDS]
"""

import dataclasses
import statistics
import sys

import torch

from ladref.fast.timing import measure_batch_steps
from ladref.models import load_default_model
from ladref.runner import check_model

torch.set_num_threads(2)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
model, _ = load_default_model()
on = check_model(model)
assert on.shared_kv, on
off = dataclasses.replace(on, shared_kv=False)
cases = [(1, 8, 512), (1, 16, 512), (2, 1, 800), (2, 8, 512), (4, 4, 512), (8, 1, 800), (8, 4, 512), (16, 1, 800)]
print(f"# eager pass (B rows x q tokens over kv cached), ms, median of 3 passes per round, {rounds} rounds; "
      f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for b, q, kv in cases:
    times = {"repeat_kv": [], "shared": []}
    for r in range(rounds):
        for name, facts in (("repeat_kv", off), ("shared", on)) if r % 2 == 0 else (("shared", on), ("repeat_kv", off)):
            times[name].append(1e3 * measure_batch_steps(model, facts, b, [q], [kv], 3)[0][0])
    a, s = statistics.median(times["repeat_kv"]), statistics.median(times["shared"])
    print(f"B {b:2d} q {q:2d} kv {kv}: repeat_kv {a:6.1f}  shared {s:6.1f}  shared/repeat_kv {s / a:.3f}   "
          f"(repeat_kv {min(times['repeat_kv']):.1f}-{max(times['repeat_kv']):.1f}, shared {min(times['shared']):.1f}-{max(times['shared']):.1f})",
          flush=True)
