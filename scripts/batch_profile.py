"""Where a batched decoder's time goes: one batch of Spec-Bench prompts per method under cProfile.

For each method the same B prompts are decoded once to warm up, then once under cProfile; it prints
the wall time, the calling thread's waits on locks and the functions with the most time of
their own. The batch's passes run in the calling thread
(`ladref.batch.BatchRunner.serve`) and each row's step in a thread of its own; the calling
thread's waits on its lock are the time the rows' own host work held the passes up. Under
Python 3.11 cProfile counted the calling thread only; under 3.12 (on the GPU machine) the rows'
functions appeared too, their call counts mixed across threads. On a GPU the passes are short
and the host's per-row work can decide.

    python scripts/batch_profile.py --batch 12 --max-new-tokens 64 --device cuda --dtype float16
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import threading
import time

import torch

from ladref import load_default_model
from ladref.bench.datasets import SPECBENCH_TASKS, encode_prompts, load_prompts
from ladref.bench.load import LoadSettings, load_decoders
from ladref.fast.surface import CostSurface


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--methods", default="greedy,threshold,prompt_lookup,lookahead,adaptive")
    parser.add_argument("--top", type=int, default=18)
    parser.add_argument("--surface", default=None, help="a saved cost surface (JSON) for adaptive (default: a GPU-shaped roofline)")
    args = parser.parse_args()
    model, tokenizer = load_default_model(device=args.device, dtype=getattr(torch, args.dtype))
    per_task = -(-args.batch // len(SPECBENCH_TASKS))
    prompts = load_prompts("specbench", limit=per_task)
    ids = [t[0] for t in encode_prompts(tokenizer, prompts[:args.batch])]
    eos = [model.generation_config.eos_token_id]
    methods = tuple(dict.fromkeys(("greedy", *args.methods.split(","))))
    surface = CostSurface.load(args.surface) if args.surface else CostSurface.roofline(0.010, 0.010 / 512, batches=(1, 2, 4, 8, 16, 32))
    decoders = load_decoders(LoadSettings(methods=methods, lookup_tokens=4), surface, eos)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    print(f"{model.device} {args.dtype}, B={len(ids)}, {args.max_new_tokens} new tokens a row")
    for name in methods:
        decoders[name](model, ids, args.max_new_tokens)  # warm-up
        sync()
        profile, rows_profiles, began = cProfile.Profile(), [], time.perf_counter()
        if sys.version_info < (3, 12):  # each row's thread gets a profiler of its own, merged below
            threading.setprofile(lambda *_: (sys.setprofile(None), rows_profiles.append(cProfile.Profile()), rows_profiles[-1].enable()))
        profile.enable()
        rows = decoders[name](model, ids, args.max_new_tokens)
        sync()
        profile.disable()
        threading.setprofile(None)
        wall = time.perf_counter() - began
        stats = pstats.Stats(profile, stream=(text := io.StringIO()))
        waits = sum(v[2] for k, v in stats.stats.items() if "acquire" in k[2] or k[2] == "wait")
        tokens = sum(len(r.token_ids) for r in rows)
        print(f"\n=== {name}: {wall:.2f} s, {tokens / wall:.1f} tokens/s (profiled); the calling thread waited {waits:.2f} s on locks")
        stats.sort_stats("tottime").print_stats(args.top)
        if rows_profiles:
            print(f"(the rows' threads, {len(rows_profiles)} of them, merged:)", file=text)
            rows_stats = pstats.Stats(rows_profiles[0], stream=text)
            for other in rows_profiles[1:]:
                rows_stats.add(other)
            rows_stats.sort_stats("tottime").print_stats(args.top)
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:12000])


if __name__ == "__main__":
    main()
