"""`adaptive` at B = 2 with its default sources and with prompt lookup alone, against batched greedy.

12 Spec-Bench prompts (2 per task), 32 new tokens, decoded 2 at a time by each method in turns
(the order flips every batch), two rounds; CPU, 2 threads, float32 SmolLM2-135M:

    python benchmarks/results/load/plain_steps_b16/b2_sources.py \
        benchmarks/results/load/threads_linears_b16/load_surface_cpu.json 2 > benchmarks/results/load/plain_steps_b16/b2_sources.log
"""
import sys, time, torch
from ladref import load_default_model, greedy_decode
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.adaptive import AdaptiveDecoder
from ladref.fast.surface import CostSurface
from ladref.sources.prompt_lookup import PromptLookupProposer
torch.set_num_threads(2)
model, tok = load_default_model(device="cpu")
prompts = encode_prompts(tok, load_prompts("specbench", limit=2))
eos = [tok.eos_token_id]; B = int(sys.argv[2]); N = 32
surface = CostSurface.load(sys.argv[1])
ad = AdaptiveDecoder(model, cost=surface)
pl = AdaptiveDecoder(model, cost=surface, proposers=[PromptLookupProposer()], window=None)
methods = {"greedy": lambda p: greedy_decode(model, p, N, eos_token_id=eos), "adaptive": lambda p: ad(p, N, eos_token_id=eos),
           "adaptive_pl": lambda p: pl(p, N, eos_token_id=eos)}
greedy_decode(model, prompts[0], 2)
tot = {m: 0.0 for m in methods}; toks = {m: 0 for m in methods}; fed = {m: [0, 0] for m in methods}
for rnd in range(2):
    for i in range(0, len(prompts), B):
        batch = prompts[i:i + B]
        order = list(methods) if (i // B + rnd) % 2 == 0 else list(methods)[::-1]
        for m in order:
            t = time.perf_counter(); r = methods[m](batch); tot[m] += time.perf_counter() - t
            toks[m] += sum(len(x.token_ids) for x in r)
            fed[m][0] += sum(sum(x.stats.forward_tokens_per_step) for x in r); fed[m][1] += sum(x.stats.steps for x in r)
for m in methods:
    print(f"B={B} {m:12s} {toks[m]/tot[m]:6.2f} tok/s  x greedy {tot['greedy']/tot[m]:.3f}  S {toks[m]/fed[m][1]:.2f} fed/step {fed[m][0]/fed[m][1]:.2f}")
