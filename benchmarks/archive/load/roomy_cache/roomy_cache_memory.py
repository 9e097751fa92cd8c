"""Peak memory of a batch of 16, batched greedy and `adaptive`, with the cache's room to spare
(this checkout) and with `torch.cat` (an earlier checkout, its path the first argument): each
run in a fresh process, `scripts/batch_memory.py`'s child (16 Spec-Bench prompts, 64 new tokens,
1 thread), two rounds in turns. Its log: roomy_cache_memory.log.

    git worktree add /tmp/before bb708dc
    python benchmarks/results/load/roomy_cache/roomy_cache_memory.py /tmp/before
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "scripts"))
from batch_memory import CHILD  # noqa: E402

for rnd in range(2):
    for variant, path in (("torch.cat (bb708dc)", sys.argv[1]), ("room to spare", str(ROOT))):
        for method in ("greedy", "adaptive"):
            code = CHILD.format(threads=1, batch=16, method=method, tokens=64)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 env={**os.environ, "PYTHONPATH": path})
            print(f"round {rnd}  {variant:20s} {method:9s} peak {int(out.stdout.strip().splitlines()[-1]) / 2**20:7.0f} MiB", flush=True)
