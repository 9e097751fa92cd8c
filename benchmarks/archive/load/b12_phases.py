"""Batched greedy and adaptive on the load benchmark's B = 12 batch (12 Spec-Bench prompts, 64 new tokens, EOS on), in turns,
with the seconds of each phase of the engine (prefill, the pool's seed and row selects, plain, bare and drafting steps).
Run from the repository root: PYTHONPATH=. python benchmarks/archive/load/b12_phases.py"""
import torch, time, sys, collections, json
from ladref.bench.local_model import load_bench_model
from ladref.bench.datasets import load_prompts, encode_prompts
from ladref import greedy_decode
from ladref.fast.adaptive import AdaptiveDecoder
from ladref.pricing.surface import CostSurface
import ladref.batched.sources.pool as pool_mod, ladref.batched.sources.recycling as rec_mod
import ladref.batched.cache as cache_mod, ladref.batched.step as step_mod, ladref.batched.loop as loop_mod
torch.set_num_threads(2)
model, tok = load_bench_model(None, None, None)[:2]
prompts = [p.flatten() for p in encode_prompts(tok, load_prompts("specbench", limit=2))]
print([len(p) for p in prompts])
eos = [tok.eos_token_id]
surface = CostSurface.load("benchmarks/results/load/load_surface_cpu.json")
ad = AdaptiveDecoder(model, cost=surface)
T = collections.Counter()
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[label] += time.perf_counter() - t; return r
    setattr(obj, name, g)
wrap(pool_mod.BatchPool, "seed", "pool.seed"); wrap(pool_mod.BatchPool, "select", "pool.select")
wrap(pool_mod.BatchPool, "__init__", "pool.alloc")
wrap(rec_mod.BatchRecycling, "select", "rec.select"); wrap(rec_mod.BatchRecycling, "begin", "rec.begin")
wrap(cache_mod.BatchCache, "prefill", "prefill"); wrap(cache_mod.BatchCache, "select", "cache.select")
wrap(step_mod.BatchStep, "run_plain", "run_plain"); wrap(step_mod.BatchStep, "run_bare", "run_bare"); wrap(step_mod.BatchStep, "run", "run")
wrap(step_mod.BatchStep, "plan", "plan"); wrap(step_mod.BatchStep, "select", "step.select")
runs = {"greedy": lambda: greedy_decode(model, prompts, 64, eos_token_id=eos), "adaptive": lambda: ad(prompts, 64, eos_token_id=eos)}
for name, f in runs.items(): f()
for rnd in range(2):
    for name, f in runs.items():
        T.clear(); t = time.perf_counter(); r = f(); wall = time.perf_counter() - t
        print(rnd, name, round(wall, 2), {k: round(v, 3) for k, v in sorted(T.items())}, flush=True)
