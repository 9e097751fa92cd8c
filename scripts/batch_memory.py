"""Peak memory of decoding a batch, per method: each run in a fresh process, its peak resident set read at the end.

The same B Spec-Bench prompts (one per task, in turn) are decoded as one batch by each method in a
process of its own; "model only" loads the model and decodes nothing. What a method adds is its
peak minus the model-only peak; the ratio to batched greedy's is what the batch's drafts cost in memory.

    python scripts/batch_memory.py --batch 16 --max-new-tokens 64 --threads 1 --out benchmarks/archive/load/batch_memory_cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import resource, sys, torch
torch.set_num_threads({threads})
from ladref import load_default_model
from ladref.bench.datasets import SPECBENCH_TASKS, encode_prompts, load_prompts
from ladref.bench.load import LoadSettings, load_decoders
from ladref.pricing.surface import CostSurface
model, tokenizer = load_default_model(device="cpu", dtype=torch.float32)
per_task = -(-{batch} // len(SPECBENCH_TASKS))
prompts = load_prompts("specbench", limit=per_task)
order = [p for i in range(per_task) for p in prompts[i::per_task]][:{batch}]
ids = [t[0] for t in encode_prompts(tokenizer, order)]
eos = [model.generation_config.eos_token_id]
surface = CostSurface.roofline(0.015, 0.0014)
method = "{method}"
if method != "model only":
    rows = load_decoders(LoadSettings(methods=tuple(dict.fromkeys(("greedy", method))), lookup_tokens=4), surface, eos)[method](model, ids, {tokens})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""
METHODS = ("model only", "greedy", "generate", "lookahead", "prompt_lookup", "threshold", "chain", "adaptive")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    peaks = {}
    for method in METHODS:
        code = CHILD.format(threads=args.threads, batch=args.batch, method=method, tokens=args.max_new_tokens)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        peaks[method] = int(out.stdout.strip().splitlines()[-1])
        print(f"{method:14s} peak {peaks[method] / 2**20:8.0f} MiB", flush=True)
    base = peaks["model only"]
    greedy = peaks["greedy"] - base
    rows = {m: {"peak_mib": round(p / 2**20, 1), "above_model_mib": round((p - base) / 2**20, 1),
                "ratio_to_batched_greedy": round((p - base) / greedy, 3) if m != "model only" else None}
            for m, p in peaks.items()}
    for m, row in rows.items():
        print(f"{m:14s} {row}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"batch": args.batch, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                       "model": "SmolLM2-135M-Instruct float32, cpu", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
