"""Compiled adaptive decoding on a GPU: CUDA graphs over a few step widths, exact, and what a step costs.

Eager greedy, compiled greedy (`CompiledDecoder`), compiled adaptive (`CompiledAdaptiveDecoder`,
one cache length, the widths given) and adaptive over the same compiled steps with the sources
that remember (`remembering_proposers`), on one Spec-Bench prompt per task, each output checked
against eager greedy's. It reports the seconds spent capturing, how many graphs Inductor skipped
(``counters["inductor"]["cudagraph_skips"]``: 0 when every step replays as a CUDA graph), and
per method S, ms a step and tokens/s. The source of the compiled-adaptive rows in docs/gpu.md:

    python scripts/gpu_compiled_adaptive.py --device cuda --dtype float16 --widths 1,8,32
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
from torch._dynamo.utils import counters

from ladref import CompiledDecoder, greedy_decode, load_default_model
from ladref.bench.agreement import first_divergence, greedy_gap_at
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.adaptive import remembering_proposers
from ladref.fast.compiled_adaptive import CompiledAdaptiveDecoder
from ladref.pricing.cost_cache import CostCache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--widths", default="1,8,32")
    parser.add_argument("--limit", type=int, default=1, help="Spec-Bench prompts per task")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=1536)
    parser.add_argument("--mode", default="auto", help='"auto" (CUDA graphs on CUDA), or "none" for a dry run')
    parser.add_argument("--greedy-only", action="store_true", help="eager and compiled greedy only (no adaptive rows)")
    args = parser.parse_args()
    mode = None if args.mode == "none" else args.mode
    model, tokenizer = load_default_model(device=args.device, dtype=getattr(torch, args.dtype))
    ids = [t[0] for t in encode_prompts(tokenizer, load_prompts("specbench", limit=args.limit))]
    n = args.max_new_tokens
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    print(f"{torch.cuda.get_device_name() if model.device.type == 'cuda' else 'cpu'}, {args.dtype}, {len(ids)} prompts "
          f"({min(map(len, ids))}-{max(map(len, ids))} tokens), {n} new tokens, widths {args.widths}, mode {mode}", flush=True)

    counters.clear()
    began = time.perf_counter()
    greedy = CompiledDecoder(model, None, max_length=args.max_length, mode=mode)
    greedy.warmup()
    print(f"compiled greedy captured in {time.perf_counter() - began:.1f} s", flush=True)
    methods = {"eager greedy": lambda x: greedy_decode(model, x, n, eos_token_id=[]),
               "compiled greedy": lambda x: greedy(x, n, eos_token_id=[])}
    if not args.greedy_only:
        widths = tuple(int(w) for w in args.widths.split(","))
        adaptive = CompiledAdaptiveDecoder(model, max_lengths=args.max_length, widths=widths, mode=mode, cache=CostCache())
        print(f"compiled adaptive captured and measured in {adaptive.warmup():.1f} s", flush=True)
        remembering = copy.copy(adaptive)  # the same compiled runners and curves, other sources
        remembering.proposers, remembering.keep_learning = remembering_proposers(model), True
        methods["compiled adaptive"] = lambda x: adaptive(x, n, eos_token_id=[])
        methods["compiled adaptive, sources that remember"] = lambda x: remembering(x, n, eos_token_id=[])
    print(f"cudagraph_skips after capture: {counters['inductor']['cudagraph_skips']}", flush=True)

    for run in methods.values():  # one untimed call each: first-call costs out of the timings
        run(ids[0][:64])
    totals = {name: [0.0, 0, 0, 0] for name in methods}  # seconds, tokens, steps, identical
    for x in ids:
        reference = None
        for name, run in methods.items():
            sync()
            start = time.perf_counter()
            result = run(x)
            sync()
            total = totals[name]
            total[0] += time.perf_counter() - start
            total[1] += len(result.token_ids)
            total[2] += result.stats.steps
            reference = result.token_ids if reference is None else reference
            total[3] += result.token_ids == reference
            if result.token_ids != reference:
                print(f"{name}: prompt of {len(x)} tokens, {first_difference(model, x, reference, result.token_ids)}")
    print(f"cudagraph_skips after decoding: {counters['inductor']['cudagraph_skips']}")
    base = totals["eager greedy"][1] / totals["eager greedy"][0]
    print("| method | S | ms/step | tok/s | vs eager greedy | identical |\n|---|---|---|---|---|---|")
    for name, (seconds, tokens, steps, same) in totals.items():
        print(f"| {name} | {tokens / steps:.2f} | {1000 * seconds / steps:.1f} | {tokens / seconds:.1f} | "
              f"{tokens / seconds / base:.2f}x | {same}/{len(ids)} |")


def first_difference(model: torch.nn.Module, prompt: torch.Tensor, reference: list[int], tokens: list[int]) -> str:
    """Where `tokens` first leaves `reference` (eager greedy's), and eager greedy's top-2 logit gap
    there, its own computation replayed (`ladref.bench.agreement.greedy_gap_at`)."""
    i = first_divergence(reference, tokens)
    return f"first differs at new token {i} ({tokens[i]} for {reference[i]}); eager greedy's top-2 gap there {greedy_gap_at(model, prompt, reference, i):.3f}"


if __name__ == "__main__":
    main()
