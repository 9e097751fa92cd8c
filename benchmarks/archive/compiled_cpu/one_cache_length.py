"""Compiled adaptive decoding over one static cache (the longest) against two (a short one for short prompts).

Before steps attended over the slots they use, a short prompt over a long cache paid for every
slot, so `CompiledAdaptiveDecoder` (and the benchmark's compiled rows) kept a 512-slot cache for
short prompts beside the long one: two packages, two copies of the weights. This asks whether the
short one still pays. Two decoders of float32 SmolLM2-135M, max_lengths (512, 1404), the
benchmark's for 128 new tokens over Spec-Bench, and (1404,) alone, load their packages from DIR
(built by ``python -m ladref bench ... --method compiled_adaptive --compile-dir DIR``), then decode
the same Spec-Bench prompts in turns, prompt by prompt, every output compared. ``--only`` runs
one decoder alone, for its peak memory (``/usr/bin/time -v``).

    python benchmarks/results/compiled_cpu/one_cache_length.py DIR [--only one|two]
"""

from __future__ import annotations

import argparse
import time

import torch

from ladref import CompiledAdaptiveDecoder, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts

LENGTHS = {"two": (512, 1404), "one": (1404,)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compile_dir")
    parser.add_argument("--limit", type=int, default=4, help="Spec-Bench prompts per task")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--only", choices=tuple(LENGTHS), default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_default_model("cpu")
    names = (args.only,) if args.only else tuple(LENGTHS)
    decoders = {n: CompiledAdaptiveDecoder(model, max_lengths=LENGTHS[n], compile_dir=args.compile_dir) for n in names}
    for name, decoder in decoders.items():
        print(f"# {name}: max_lengths {LENGTHS[name]}, packages loaded and curves read in {decoder.warmup():.1f} s")
    prompts = load_prompts("specbench", args.limit)
    seconds, tokens, steps, same = {n: 0.0 for n in names}, {n: 0 for n in names}, {n: 0 for n in names}, 0
    for prompt, ids in zip(prompts, encode_prompts(tokenizer, prompts)):
        out = {}
        for name, decoder in decoders.items():
            start = time.perf_counter()
            result = decoder(ids, args.max_new_tokens)
            seconds[name] += time.perf_counter() - start
            tokens[name] += len(result.token_ids)
            steps[name] += result.stats.steps
            out[name] = result.token_ids
        same += len(set(map(tuple, out.values()))) == 1
    print(f"# {__doc__.splitlines()[0]}")
    print(f"# {len(prompts)} Spec-Bench prompts ({args.limit} a task), {args.max_new_tokens} new tokens, 2 threads, "
          f"in turns prompt by prompt; torch {torch.__version__}")
    for name in names:
        print(f"{name}: {tokens[name] / seconds[name]:.1f} tokens/s, {1e3 * seconds[name] / steps[name]:.1f} ms/step, "
              f"S {tokens[name] / steps[name]:.2f}, {seconds[name]:.1f} s")
    if len(names) == 2:
        print(f"one / two, tokens per second: {(tokens['one'] / seconds['one']) / (tokens['two'] / seconds['two']):.3f}; "
              f"identical outputs: {same}/{len(prompts)}")


if __name__ == "__main__":
    main()
