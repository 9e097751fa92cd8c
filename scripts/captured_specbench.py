"""The captured batched step on the real model, one prompt at a time: SmolLM2-135M-Instruct on Spec-Bench prompts
(one per task from the first), captured greedy, lookahead and prompt lookup against `CompiledDecoder`'s
compiled greedy (each compiled once, out of the clock), interleaved prompt by prompt.

    python scripts/captured_specbench.py --prompts 6 >> benchmarks/archive/captured_step/captured_specbench_cpu.log

Prints, per decoder: tokens/s over all prompts, ms a step, tokens a step, its speedup over compiled
greedy, and how many outputs equal compiled greedy's.
"""

from __future__ import annotations

import argparse
import time

import torch

from ladref import CapturedBatchDecoder, CompiledDecoder, LookaheadConfig, LookaheadProposer, PromptLookupProposer, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.runinfo import git_commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", default="default")
    parser.add_argument("--max-length", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model()
    ids = [t[0] for t in encode_prompts(tokenizer, load_prompts("specbench", limit=args.prompts))]
    decoders = {"compiled greedy": CompiledDecoder(model, None, max_length=args.max_length, mode=args.mode)}
    for name, proposers in [("greedy", []), ("lookahead 4/4/4", [LookaheadProposer(LookaheadConfig(4, 4, 4))]),
                            ("prompt lookup", [PromptLookupProposer(4)])]:
        decoders[f"captured {name}"] = CapturedBatchDecoder(model, proposers, max_length=args.max_length, mode=args.mode,
                                                            steps_per_read=8)
    compile_s = {}
    for name, decoder in decoders.items():  # compile, out of the clock
        start = time.perf_counter()
        decoder(ids[0][:8], 4) if isinstance(decoder, CompiledDecoder) else decoder([ids[0][:8]], 4)
        compile_s[name] = time.perf_counter() - start
    seconds = dict.fromkeys(decoders, 0.0)
    steps, tokens, outputs = dict.fromkeys(decoders, 0), dict.fromkeys(decoders, 0), {n: [] for n in decoders}
    for x in ids:  # interleaved, prompt by prompt
        for name, decoder in decoders.items():
            start = time.perf_counter()
            if isinstance(decoder, CompiledDecoder):
                result = decoder(x, args.new_tokens, eos_token_id=[])
                steps[name] += result.stats.steps
            else:
                result = decoder([x], args.new_tokens, eos_token_id=[])
                steps[name] += result.passes - 1
                result = result[0]
            seconds[name] += time.perf_counter() - start
            tokens[name] += len(result.token_ids)
            outputs[name].append(result.token_ids)
    print(f"cpu  SmolLM2-135M-Instruct float32, torch {torch.__version__}, {args.threads} threads, mode {args.mode}, "
          f"{len(ids)} Spec-Bench prompts, {args.new_tokens} new tokens, max_length {args.max_length}; commit {git_commit()}")
    print("| decoder | tokens/s | ms a step | tokens a step | x compiled greedy | equal to compiled greedy | compile s |")
    print("|---|---|---|---|---|---|---|")
    base = tokens["compiled greedy"] / seconds["compiled greedy"]
    for name in decoders:
        rate = tokens[name] / seconds[name]
        equal = sum(a == b for a, b in zip(outputs[name], outputs["compiled greedy"]))
        print(f"| {name} | {rate:.1f} | {1e3 * seconds[name] / steps[name]:.2f} | {tokens[name] / steps[name]:.2f} | "
              f"{rate / base:.2f}x | {equal}/{len(ids)} | {compile_s[name]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
