"""``python -m ladref demo``: greedy, lookahead and adaptive decoding on the embedded SmolLM2 model.

Measures this machine's step-cost curve t(q) first, decodes one prompt three ways and explains
what it measured: the output (identical), how many tokens each lookahead step accepted (a
histogram), the compression S, the FLOPs spent, the time ratios, what the lookahead ratio means
on this hardware (the cost of one wide step against one narrow step), and why adaptive
decoding fed what it fed (the cost curve and the acceptance it learned). The GPU figures
committed in ``benchmarks/results_gpu`` are quoted when they exist.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from ..adaptive import AdaptiveDecoder
from ..config import LookaheadConfig
from ..cost import CostModel
from ..greedy import greedy_decode
from ..lookahead import lookahead_decode
from ..models import chat_ids, load_default_model
from ..results import DecodeResult
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


def verdict(model, result: DecodeResult, cost: CostModel, measured: float) -> str:
    """What the time ratio means here: S against the cost of a wide step in narrow steps, then
    what was `measured` (lookahead's speed over greedy's), which decides the last sentence."""
    q = min(round(result.stats.mean_forward_tokens), cost.max_width)
    ratio, s = cost.relative(q), result.stats.compression
    expect = s / ratio
    line = (f"on this {model.device.type.upper()}: a {q}-token step costs {ratio:.1f} one-token steps "
            f"(t({q}) = {1e3 * cost.time(q):.0f} ms, t(1) = {1e3 * cost.time(1):.0f} ms), so lookahead wins only where "
            f"S > {ratio:.1f}; with S = {s:.2f} expect about {expect:.2f}x.")
    if measured < 1:
        return line + f" Measured: {measured:.2f}x, so here fixed-width lookahead is slower than greedy decoding."
    return line + f" Measured: {measured:.2f}x, so here lookahead decoding pays off."


def adaptive_reasons(decoder: AdaptiveDecoder, result: DecodeResult) -> str:
    """Two lines: the cost curve it weighed, and the acceptance it learned (and what it then fed)."""
    cost, stats = decoder.cost, result.stats
    widths = [q for q in (2, 4, 8, 16, 32) if q <= cost.max_width]
    curve = ", ".join(f"t({q}) = {cost.relative(q):.1f}" for q in widths)
    counts: dict[str, list[float]] = {}  # source -> [accepted, checked] of first draft tokens, every grade of evidence
    for (source, _, depth, rank), rate in decoder.policy.rates.items():
        if depth == 1 and rank == 0:
            seen = counts.setdefault(source, [0.0, 0.0])
            seen[0] += rate.accepted - decoder.policy.prior[0]
            seen[1] += rate.reached - decoder.policy.prior[1]
    rates = {s: f"{s} {a / n:.0%} of {int(n)} checks" for s, (a, n) in counts.items() if n}
    drafted = sum(d > 0 for d in stats.draft_tokens_per_step)
    windowed = sum(w > 0 for w in stats.window_tokens_per_step)
    return (f"  cost here, in one-token steps: {curve}: a draft pays only if it carries about {cost.relative(widths[0]) - 1:.1f}"
            f" more accepted tokens than none\n"
            f"  acceptance of each source's first draft token, checked on every step: {'; '.join(rates.values()) or 'none yet'}; "
            f"so it drafted on {drafted} of {stats.steps} steps (the window on {windowed}), {stats.mean_forward_tokens:.1f} tokens per step")


def run(args: argparse.Namespace) -> int:
    """Load the model, decode the prompt three ways, explain the comparison; 0 when outputs match."""
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, max_candidates=args.candidates)
    model, tokenizer = load_default_model(device=args.device)
    prompt = chat_ids(tokenizer, args.prompt)
    print(f"model: SmolLM2-135M-Instruct on {model.device} ({model.dtype}), torch threads: {torch.get_num_threads()}")
    print(f"prompt: {args.prompt!r} ({prompt.shape[1]} tokens); lookahead W={config.window_size} N={config.ngram_size} "
          f"G={config.max_candidates}: up to {config.max_step_tokens()} tokens per step", flush=True)
    greedy_decode(model, prompt, 8)  # warm-up, so no timing pays first-call costs
    print("[1/4] measuring this machine's step cost t(q) ...", end=" ", flush=True)
    start = time.perf_counter()
    cost = CostModel.measure(model, (1, 2, 4, 8, 16, 32), (prompt.shape[1] + args.max_new_tokens // 2,), repeats=3)
    print(f"{time.perf_counter() - start:.1f} s\n[2/4] greedy decoding ...", end=" ", flush=True)
    greedy = greedy_decode(model, prompt, args.max_new_tokens, tokenizer=tokenizer)
    print(f"{greedy.stats.wall_time_s:.1f} s\n[3/4] lookahead decoding ...", end=" ", flush=True)
    lookahead = lookahead_decode(model, prompt, args.max_new_tokens, config=config, tokenizer=tokenizer)
    print(f"{lookahead.stats.wall_time_s:.1f} s\n[4/4] adaptive decoding ...", end=" ", flush=True)
    decoder = AdaptiveDecoder(model, cost=cost, calibrate=True)  # measured here: corrected by its steps
    adaptive = decoder(prompt, args.max_new_tokens, tokenizer=tokenizer)
    print(f"{adaptive.stats.wall_time_s:.1f} s")
    same = greedy.token_ids == lookahead.token_ids == adaptive.token_ids
    shape, g, s = ModelShape.from_model(model), greedy.stats, lookahead.stats
    flops = decode_flops(shape, s, "lookahead", config).decode / decode_flops(shape, g, "greedy").decode
    print(f"\n--- output ({s.new_tokens} tokens; identical to greedy decoding: {'yes' if same else 'NO'}) ---\n{lookahead.text}\n")
    print(f"tokens accepted per lookahead step:\n{histogram(lookahead)}")
    print(f"compression S = {s.compression:.2f} tokens per step: {s.steps} steps instead of greedy's {g.steps}")
    print(f"FLOPs: lookahead computed {flops:.1f}x greedy's FLOPs for the same tokens ({s.mean_forward_tokens:.1f} tokens per step)")
    print(f"time: greedy {g.wall_time_s:.2f} s, lookahead {s.wall_time_s:.2f} s: {g.wall_time_s / s.wall_time_s:.2f}x greedy's speed")
    print(verdict(model, lookahead, cost, g.wall_time_s / s.wall_time_s))
    a = adaptive.stats
    print(f"adaptive decoding: {a.wall_time_s:.2f} s, {g.wall_time_s / a.wall_time_s:.2f}x greedy's speed on this machine "
          f"(S = {a.compression:.2f}); why it fed what it fed:")
    print(adaptive_reasons(decoder, adaptive))
    print(gpu_expectation(config))
    return 0 if same else 1
