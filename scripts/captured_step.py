"""What the host pays a step: the batched step (`decode_batch`, one read a step) against the same step captured
whole (`CapturedBatchDecoder`, one read every k steps), uncompiled and compiled, interleaved.

A tiny model (--small) makes the forward nearly free, so ms a pass is the host's work a step: what a
GPU pays between its kernels. SmolLM2-135M's shape with random weights gives the real forward's cost
(its tokens are not text: acceptance does not carry over, ms a pass does).

    python scripts/captured_step.py --small --threads 1 >> benchmarks/archive/captured_step/captured_step_cpu.log
    python scripts/captured_step.py --device cuda --dtype float16 --mode reduce-overhead --rows 1,8

Prints, per (rows, source, path): passes, ms a pass (median of --repeats), tokens/s, and whether every
row equals its greedy output.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ladref import CapturedBatchDecoder, LookaheadConfig, LookaheadProposer, PromptLookupProposer, greedy_decode
from ladref.batched.loop import decode_batch
from ladref.batched.sources import batched_sources
from ladref.bench.runinfo import git_commit
from steps_per_read import model_of

PROPOSERS = {"greedy": lambda: [], "lookahead": lambda: [LookaheadProposer(LookaheadConfig(4, 4, 4))],
             "prompt_lookup": lambda: [PromptLookupProposer(4)]}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def batch_step(model, batch, new_tokens, name):
    """The batched step, one read a step (the eager path every batch takes today)."""
    sources = batched_sources(PROPOSERS[name](), 0, model.config.vocab_size)
    return decode_batch(model, batch, new_tokens, {"eos_token_id": []}, name, sources)


def timed(call) -> tuple[float, object]:
    sync()
    start = time.perf_counter()
    result = call()
    sync()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="a tiny model: the host's work shows")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--mode", default="default", help="the captured program's compile mode")
    parser.add_argument("--rows", default="1,16")
    parser.add_argument("--every", type=int, default=8, help="k, captured steps between reads")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = model_of(args.small, args.device, getattr(torch, args.dtype))
    vocab = model.config.vocab_size
    print(f"{args.device}  {args.dtype}, torch {torch.__version__}, {args.threads} threads, random weights, "
          f"{'tiny' if args.small else 'SmolLM2-135M'} shape, {args.new_tokens} new tokens, k = {args.every}, "
          f"mode {args.mode}, medians of {args.repeats}; commit {git_commit()}")
    print("| rows | source | path | passes | ms a pass | tokens/s | rows equal to greedy |\n|---|---|---|---|---|---|---|")
    generator = torch.Generator().manual_seed(0)
    for rows in [int(r) for r in args.rows.split(",")]:
        batch = [torch.randint(0, vocab, (16,), generator=generator).tolist() for _ in range(rows)]
        want = [greedy_decode(model, p, args.new_tokens).token_ids for p in batch]
        for name in PROPOSERS:
            paths = {"batched step": lambda: batch_step(model, batch, args.new_tokens, name)}
            for mode in (None, args.mode):
                decoder = CapturedBatchDecoder(model, PROPOSERS[name](), max_length=16 + args.new_tokens + 128, mode=mode,
                                               steps_per_read=args.every)
                decoder(batch, args.new_tokens)  # compile (once per batch size), out of the clock
                paths[f"captured, {mode or 'uncompiled'}"] = lambda decoder=decoder: decoder(batch, args.new_tokens)
            seconds = {path: [] for path in paths}
            results = {}
            for _ in range(args.repeats):  # interleaved
                for path, call in paths.items():
                    elapsed, results[path] = timed(call)
                    seconds[path].append(elapsed)
            for path, result in results.items():
                median = statistics.median(seconds[path])
                equal = sum(a == b for a, b in zip(result.token_ids, want))
                print(f"| {rows} | {name} | {path} | {result.passes} | {1e3 * median / result.passes:.2f} | "
                      f"{rows * args.new_tokens / median:.1f} | {equal}/{rows} |", flush=True)


if __name__ == "__main__":
    main()
