"""Where a batch's time goes between its passes: batched greedy and `adaptive` on B Spec-Bench prompts.

Each method decodes the same batch in turn (both orders, `--runs` times). For each batch it
prints the wall time, the first pass (every row's prompt), the later passes, and the time
between passes: the rows' own host work (laying out a step, verifying, committing, learning),
which runs one row after another under Python's GIL while the passes' thread waits. The passes
are timed by wrapping `ladref.batch.BatchRunner._pass` in this script (measurement only; the
library is not changed). With ``--cat`` each batch runs under cProfile instead and the script
prints the seconds spent in ``torch.cat`` (the KV cache's appends), profile overhead included.

    python scripts/batch_passes.py --batch 16 --max-new-tokens 32 \\
        --surface benchmarks/results/load/load_surface_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import time

import torch

from ladref import load_default_model
from ladref.batch import BatchRunner
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.adaptive import AdaptiveDecoder
from ladref.fast.surface import CostSurface
from ladref.greedy import greedy_decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--surface", required=True, help="a CostSurface JSON file (adaptive's cost)")
    parser.add_argument("--runs", type=int, default=1, help="rounds, each running both orders")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cat", action="store_true", help="profile each batch and print torch.cat's seconds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model(device="cpu")
    limit = -(-args.batch // 6)  # Spec-Bench's six tasks, taken in turn
    prompts = encode_prompts(tokenizer, load_prompts("specbench", limit=limit))[: args.batch]
    eos = [tokenizer.eos_token_id]
    adaptive = AdaptiveDecoder(model, cost=CostSurface.load(args.surface))
    methods = {"greedy": lambda: greedy_decode(model, prompts, args.max_new_tokens, eos_token_id=eos),
               "adaptive": lambda: adaptive(prompts, args.max_new_tokens, eos_token_id=eos)}
    passes: list[float] = []
    plain = BatchRunner._pass

    def timed(self: BatchRunner) -> None:
        began = time.perf_counter()
        plain(self)
        passes.append(time.perf_counter() - began)

    BatchRunner._pass = timed
    greedy_decode(model, prompts[0], 2)  # warm-up
    print(f"B = {len(prompts)} Spec-Bench prompts of {sorted(p.shape[-1] for p in prompts)} tokens, "
          f"{args.max_new_tokens} new tokens, {args.threads} threads")
    for _ in range(args.runs):
        for order in (("greedy", "adaptive"), ("adaptive", "greedy")):
            for name in order:
                passes.clear()
                profile = cProfile.Profile() if args.cat else None
                began = time.perf_counter()
                with profile if profile is not None else contextlib.nullcontext():
                    result = methods[name]()
                wall = time.perf_counter() - began
                tokens, steps = sum(len(r.token_ids) for r in result), sum(r.stats.steps for r in result)
                line = (f"{name:9s} {wall:6.2f} s: first pass {passes[0]:5.2f} s, {len(passes) - 1} later passes "
                        f"{sum(passes[1:]):5.2f} s, between passes {wall - sum(passes):5.2f} s; S {tokens / steps:.2f}")
                if profile is not None:
                    stats = pstats.Stats(profile).stats
                    line += f"; torch.cat {sum(v[2] for k, v in stats.items() if k[2] == '<built-in method torch.cat>'):5.2f} s"
                print(line, flush=True)


if __name__ == "__main__":
    main()
