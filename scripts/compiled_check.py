"""Real-model check and timing: eager greedy_decode vs CompiledDecoder(mode="max-autotune") greedy and lookahead.

The source of the CPU table in docs/compiled.md (logs in benchmarks/archive/compiled_cpu/):

    python scripts/compiled_check.py ROUNDS greedy 4/4/4 7/4/7
"""
import sys, time, statistics, torch
from ladref import CompiledDecoder, LookaheadConfig, greedy_decode, lookahead_decode, load_default_model, chat_ids
from ladref.bench.datasets import humaneval_prompts
torch.set_num_threads(2)
rounds = int(sys.argv[1]); configs = sys.argv[2:]
model, tok = load_default_model()
ids = chat_ids(tok, humaneval_prompts()[0].text)
print("prompt tokens", ids.numel(), flush=True)
N = 128
ref = greedy_decode(model, ids, N, eos_token_id=[])
print("eager greedy", ref.stats.wall_time_s, flush=True)
decoders = {}
for c in configs:
    cfg = None if c == "greedy" else LookaheadConfig(*map(int, c.split("/")))
    d = CompiledDecoder(model, cfg, max_length=512, mode="max-autotune")
    cap = d.warmup()
    r = d(ids, N, eos_token_id=[])
    print(f"{c}: capture_s {cap:.1f} exact {r.token_ids == ref.token_ids} S {r.stats.compression:.2f} wall {r.stats.wall_time_s:.2f}", flush=True)
    decoders[c] = d
times = {k: [] for k in ["eager", *configs]}
S = {}
for _ in range(rounds):
    t = time.perf_counter(); out = greedy_decode(model, ids, N, eos_token_id=[]); times["eager"].append(time.perf_counter() - t)
    for c in configs[1:]:
        t = time.perf_counter(); r = lookahead_decode(model, ids, N, config=LookaheadConfig(*map(int, c.split("/"))), eos_token_id=[])
        times.setdefault("eager " + c, []).append(time.perf_counter() - t); S["eager " + c] = r.stats.compression
        assert r.token_ids == ref.token_ids
    for c, d in decoders.items():
        t = time.perf_counter(); r = d(ids, N, eos_token_id=[]); times[c].append(time.perf_counter() - t)
        assert r.token_ids == ref.token_ids, c
        S[c] = r.stats.compression
base = statistics.median(times["eager"])
for k, v in times.items():
    print(f"{k:14s} median {statistics.median(v):.2f}s  speedup vs eager greedy {base / statistics.median(v):.2f}x  S {S.get(k, 1.0):.2f}  runs {[round(x, 2) for x in v]}")
