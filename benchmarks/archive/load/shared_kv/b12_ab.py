"""One checkout of ladref (the first on PYTHONPATH): batched greedy and `adaptive` over the first
Spec-Bench prompt of each of its six tasks (LIMIT prompts per task, default 1, as in the log),
128 new tokens, in batches of B; tokens/s and their ratio, and how many rows equal greedy's.
Both checkouts price steps on the same committed surface. Run by `b12_driver.sh`:

    python b12_ab.py B [LIMIT]
"""
import sys, time
from pathlib import Path

import torch

torch.set_num_threads(2)
import ladref
from ladref import load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.load import LoadSettings, load_decoders
from ladref.fast.surface import CostSurface
B = int(sys.argv[1])
model, tok = load_default_model()
ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", limit=int(sys.argv[2]) if len(sys.argv) > 2 else 1))]
surface = CostSurface.load(Path(__file__).parents[1] / "threads_linears_b16" / "load_surface_cpu.json")
eos = [model.generation_config.eos_token_id]
dec = load_decoders(LoadSettings(methods=("greedy", "adaptive"), lookup_tokens=4), surface, eos)
dec["adaptive"](model, [ids[0]] * B, 8)
t = {"greedy": 0.0, "adaptive": 0.0}; n = {"greedy": 0, "adaptive": 0}; toks = {"greedy": [], "adaptive": []}
for i in range(0, len(ids) - B + 1, B):
    for m in ("greedy", "adaptive"):
        s = time.perf_counter(); rows = dec[m](model, ids[i:i + B], 128); t[m] += time.perf_counter() - s
        n[m] += sum(len(r.token_ids) for r in rows); toks[m] += [r.token_ids for r in rows]
same = sum(a == b for a, b in zip(toks["greedy"], toks["adaptive"]))
print(ladref.__file__.split("/ladref/")[0], f"B={B}", {m: round(n[m] / t[m], 2) for m in t}, "ratio",
      round((n["adaptive"] / t["adaptive"]) / (n["greedy"] / t["greedy"]), 3), f"rows equal {same}/{len(toks['greedy'])}", flush=True)
