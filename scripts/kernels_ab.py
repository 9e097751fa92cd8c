"""Do ladref's CPU choices pay? Each decoder with ``kernels="auto"`` against ``kernels="transformers"``
(the model's forward exactly as transformers runs it), and transformers' ``generate()``, in one process.

    python scripts/kernels_ab.py --prompts 12 --new-tokens 64 > benchmarks/archive/kernels/kernels_ab.log

SmolLM2-135M float32 on the CPU, 2 torch threads; Spec-Bench prompts, 2 per task. Every call is timed
under the measurement protocol (`ladref.bench.protocol.rounds`: the methods in turns, each prompt
starting with another one, a disturbed call measured again, one that never settles flagged). A row
of B prompts is one call of the batched engine. Printed: each prompt's figures, then per pair the
geometric mean of the per-prompt ratios with its 95% bootstrap interval and the pooled ratio (the
sums of seconds), and whether every output equals generate()'s.
"""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import replace

import torch

from ladref import greedy_decode, load_default_model, lookahead_decode, prompt_lookup_decode
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.hf import generate_decode
from ladref.bench.protocol import Protocol, figure, load_average, rounds, settled, speedup, timed

PAIRS = ("greedy", "lookahead", "prompt_lookup", "greedy_B4")


def calls(model, ids, tokens, batch):
    """name -> (prompt index -> result) for every method."""
    decoders = {"greedy": greedy_decode, "lookahead": lookahead_decode, "prompt_lookup": prompt_lookup_decode}
    out = {"generate": lambda i: generate_decode(model, ids[i], tokens, eos_token_id=[])}
    for name, decode in decoders.items():
        for kernels in ("auto", "transformers"):
            out[f"{name}/{kernels}"] = lambda i, d=decode, k=kernels: d(model, ids[i], tokens, eos_token_id=[], kernels=k)
    for kernels in ("auto", "transformers"):  # B prompts from prompt i on, as one batch
        out[f"greedy_B{batch}/{kernels}"] = lambda i, k=kernels: greedy_decode(
            model, [ids[(i + j) % len(ids)] for j in range(batch)], tokens, eos_token_id=[], kernels=k)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    protocol = Protocol(min_rounds=2, max_rounds=5, threads=2)
    model, tok = load_default_model()
    ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", max(1, args.prompts // 6)))][: args.prompts]
    methods = calls(model, ids, args.new_tokens, args.batch)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"2 threads, SmolLM2-135M float32, {len(ids)} Spec-Bench prompts, {args.new_tokens} new tokens, "
          f"load before {load_average():.2f}", flush=True)
    seconds, flagged, same = {m: [] for m in methods}, 0, True
    for i in range(len(ids)):
        tokens = {}

        def measure(name: str):
            result, sample = timed(lambda: methods[name](i))
            rows = list(result) if hasattr(result, "results") else [result]
            tokens[name] = [r.token_ids for r in rows]
            return replace(sample, steps=1)

        samples = rounds(list(methods), measure, protocol, shift=i)
        for name, taken in samples.items():
            seconds[name].append((sum(len(t) for t in tokens[name]), figure(taken, protocol).wall_s))
            flagged += not settled(taken, protocol)
        ref = tokens["generate"][0]
        same &= all(t[0] == ref for n, t in tokens.items() if not n.startswith("greedy_B"))
        print(f"prompt {i}: " + "  ".join(f"{n} {seconds[n][-1][1]:.2f}s" for n in methods), flush=True)
    print(f"\nevery one-prompt output equals generate()'s: {same}; calls never settled: {flagged}")
    for pair in PAIRS:
        auto, plain = seconds[f"{pair}/auto"], seconds[f"{pair}/transformers"]
        gain = speedup(auto, plain)  # ladref's choices' tokens/s over transformers' forward: > 1 means they pay
        print(f"{pair:14s} auto over transformers kernels: {gain.text()} per prompt, pooled {gain.pooled:.2f}x")
        if not pair.startswith("greedy_B"):
            over = speedup(auto, seconds["generate"])
            print(f"{'':14s} auto over generate(): {over.text()}, transformers kernels over generate(): "
                  f"{speedup(plain, seconds['generate']).text()}")


if __name__ == "__main__":
    main()
