"""``python -m ladref demo``: greedy vs lookahead decoding on the embedded SmolLM2 model.

Decodes one prompt both ways and explains what it measured: the output (identical), how many
tokens each step accepted (a histogram), the compression S, the FLOPs spent, the time ratio,
and what that ratio means on this hardware: the cost of one wide step against one narrow step
measured here (the auto-tuner's cost model), and the GPU figures committed in
``benchmarks/results_gpu`` when they exist.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..greedy import greedy_decode
from ..lookahead import lookahead_decode
from ..models import chat_ids, load_default_model
from ..results import DecodeResult
from .autotune import measure_forward_cost
from .flops import ModelShape, decode_flops

DEFAULT_PROMPT = "Write a Python class for a stack with push, pop and peek methods."
CPU_CONFIG = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
GPU_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results_gpu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the demo subcommand."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message (sent through the chat template)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--window", type=int, default=CPU_CONFIG.window_size, help="W, lookahead window size")
    parser.add_argument("--ngram", type=int, default=CPU_CONFIG.ngram_size, help="N, n-gram size")
    parser.add_argument("--candidates", type=int, default=CPU_CONFIG.max_candidates, help="G, candidates verified per step")
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")


def histogram(result: DecodeResult, width: int = 40) -> str:
    """Tokens accepted per step, one text bar per count (1..N)."""
    counts = Counter(result.stats.accepted_per_step)
    top = max(counts.values())
    return "\n".join(f"  {k} token{'s' if k > 1 else ' '} {'#' * max(1, round(width * n / top)):<{width}} {n} steps"
                     for k, n in sorted(counts.items()))


def gpu_expectation(config: LookaheadConfig) -> str:
    """One line on what a GPU gives, from the committed GPU benchmark if there is one."""
    rows = []
    for path in sorted(GPU_RESULTS.glob("*.json")):
        payload = json.loads(path.read_text())
        for s in payload.get("summary", []):
            if s["method"].startswith("lookahead"):
                rows.append(f"{payload['meta'].get('dataset', path.stem)} {s['method']}: S={s['compression']:.2f}, "
                            f"{s['speedup']:.2f}x greedy")
    if rows:
        return f"on a GPU ({GPU_RESULTS.name}, committed): " + "; ".join(rows[:3])
    return ("on a GPU: a step of 1 or of a few hundred tokens costs about the same there (kernel launches, not "
            "arithmetic, set its time), so expect close to S-fold; no GPU results are committed yet "
            "(benchmarks/run_gpu.sh makes them)")


def verdict(model, result: DecodeResult, cost: dict[int, float]) -> str:
    """What the time ratio means here: S against the cost of a wide step in narrow steps."""
    q = round(result.stats.mean_forward_tokens)
    ratio, s = cost[q] / cost[1], result.stats.compression
    expect = s / ratio
    line = (f"on this {model.device.type.upper()}: a {q}-token step costs {ratio:.1f} one-token steps "
            f"(t({q}) = {1e3 * cost[q]:.0f} ms, t(1) = {1e3 * cost[1]:.0f} ms), so lookahead wins only where S > {ratio:.1f}; "
            f"with S = {s:.2f} expect about {expect:.2f}x.")
    if expect < 1:
        return line + " Here greedy decoding is the faster choice; `python -m ladref bench --autotune` measures it."
    return line + " Here lookahead decoding pays off."


def run(args: argparse.Namespace) -> int:
    """Load the model, decode the prompt both ways, explain the comparison; 0 when outputs match."""
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, max_candidates=args.candidates)
    model, tokenizer = load_default_model(device=args.device)
    prompt = chat_ids(tokenizer, args.prompt)
    print(f"model: SmolLM2-135M-Instruct on {model.device} ({model.dtype}), torch threads: {torch.get_num_threads()}")
    print(f"prompt: {args.prompt!r} ({prompt.shape[1]} tokens); lookahead W={config.window_size} N={config.ngram_size} "
          f"G={config.max_candidates}: up to {config.max_step_tokens()} tokens per step", flush=True)
    greedy_decode(model, prompt, 8)  # warm-up, so neither timing pays first-call costs
    print("[1/3] greedy decoding ...", end=" ", flush=True)
    greedy = greedy_decode(model, prompt, args.max_new_tokens, tokenizer=tokenizer)
    print(f"{greedy.stats.wall_time_s:.1f} s\n[2/3] lookahead decoding ...", end=" ", flush=True)
    lookahead = lookahead_decode(model, prompt, args.max_new_tokens, config=config, tokenizer=tokenizer)
    print(f"{lookahead.stats.wall_time_s:.1f} s\n[3/3] timing forward passes of 1 and of "
          f"{round(lookahead.stats.mean_forward_tokens)} tokens ...", end=" ", flush=True)
    start = time.perf_counter()
    cost = measure_forward_cost(model, (1, round(lookahead.stats.mean_forward_tokens)), context=prompt.shape[1] + 64, repeats=3)
    print(f"{time.perf_counter() - start:.1f} s")
    same = greedy.token_ids == lookahead.token_ids
    shape, g, s = ModelShape.from_model(model), greedy.stats, lookahead.stats
    flops = decode_flops(shape, s, "lookahead", config).decode / decode_flops(shape, g, "greedy").decode
    print(f"\n--- output ({s.new_tokens} tokens; identical to greedy decoding: {'yes' if same else 'NO'}) ---\n{lookahead.text}\n")
    print(f"tokens accepted per lookahead step:\n{histogram(lookahead)}")
    print(f"compression S = {s.compression:.2f} tokens per step: {s.steps} steps instead of greedy's {g.steps}")
    print(f"FLOPs: lookahead computed {flops:.1f}x greedy's FLOPs for the same tokens ({s.mean_forward_tokens:.1f} tokens per step)")
    print(f"time: greedy {g.wall_time_s:.2f} s, lookahead {s.wall_time_s:.2f} s: {g.wall_time_s / s.wall_time_s:.2f}x greedy's speed")
    print(verdict(model, lookahead, cost))
    print(gpu_expectation(config))
    return 0 if same else 1
