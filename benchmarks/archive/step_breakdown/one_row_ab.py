"""Does one row's W @ [x; 0]^T pay? One-prompt greedy and prompt lookup with ladref's CPU choices as they
are (``auto``: linears of 1-8 rows as W @ x^T), with one-row passes left to torch (``auto_2to8``: 2-8 rows),
and with ``kernels="transformers"``, beside ``generate()``, in one process, under the measurement protocol.

    PYTHONPATH=. python benchmarks/archive/step_breakdown/one_row_ab.py --prompts 6 --new-tokens 32

The ``auto_2to8`` arm sets ``ladref.kernels.SMALL_ROWS`` for its calls only (an experiment, not an option).
"""
import argparse, os, platform
from dataclasses import replace
import torch
import ladref.kernels as kernels_mod
from ladref import greedy_decode, load_default_model, prompt_lookup_decode
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.hf import generate_decode
from ladref.bench.protocol import Protocol, figure, load_average, rounds, settled, speedup, timed

ALL, NO_ONE = range(1, 9), range(2, 9)


def arm(decode, rows, **kw):
    def call(model, ids, tokens):
        kernels_mod.SMALL_ROWS = rows
        try:
            return decode(model, ids, tokens, eos_token_id=[], **kw)
        finally:
            kernels_mod.SMALL_ROWS = ALL
    return call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(2)
    protocol = Protocol(min_rounds=3, max_rounds=6, threads=2)
    model, tok = load_default_model()
    ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", max(1, args.prompts // 6)))][: args.prompts]
    methods = {"generate": lambda m, i, n: generate_decode(m, i, n, eos_token_id=[])}
    for name, decode in (("greedy", greedy_decode), ("prompt_lookup", prompt_lookup_decode)):
        methods[f"{name}/auto"] = arm(decode, ALL)
        methods[f"{name}/auto_2to8"] = arm(decode, NO_ONE)
        methods[f"{name}/transformers"] = arm(decode, ALL, kernels="transformers")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, 2 threads, "
          f"SmolLM2-135M float32, {len(ids)} Spec-Bench prompts, {args.new_tokens} new tokens, load before {load_average():.2f}",
          flush=True)
    seconds, flagged, same = {m: [] for m in methods}, 0, True
    for i in range(len(ids)):
        tokens = {}

        def measure(name):
            result, sample = timed(lambda: methods[name](model, ids[i], args.new_tokens))
            tokens[name] = result.token_ids
            return replace(sample, steps=1)

        samples = rounds(list(methods), measure, protocol, shift=i)
        for name, taken in samples.items():
            seconds[name].append((len(tokens[name]), figure(taken, protocol).wall_s))
            flagged += not settled(taken, protocol)
        same &= all(t == tokens["generate"] for t in tokens.values())
        print(f"prompt {i}: " + "  ".join(f"{n} {seconds[n][-1][1]:.2f}s" for n in methods), flush=True)
    print(f"\nevery output equals generate()'s: {same}; calls never settled: {flagged}")
    for name in ("greedy", "prompt_lookup"):
        for a, b in (("auto", "transformers"), ("auto_2to8", "transformers"), ("auto_2to8", "auto")):
            gain = speedup(seconds[f"{name}/{a}"], seconds[f"{name}/{b}"])
            print(f"{name:14s} {a} over {b}: {gain.text()} per prompt, pooled {gain.pooled:.2f}x")
        for a in ("auto", "auto_2to8", "transformers"):
            print(f"{name:14s} {a} over generate(): {speedup(seconds[f'{name}/{a}'], seconds['generate']).text()}")


if __name__ == "__main__":
    main()
