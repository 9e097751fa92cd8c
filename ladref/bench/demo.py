"""``python -m ladref demo``: greedy, lookahead and adaptive decoding on the embedded SmolLM2 model.

Takes this machine's step-cost curve t(q, kv) where `adaptive_decode` takes it (the user's cost
cache: measured on the first run, read on every later one), decodes one prompt three ways,
interleaved over a few rounds after a warm-up (the fastest round of each counts), and explains
what it measured: the output (identical), how many tokens each lookahead step accepted (a
histogram), the compression S, the FLOPs spent, the time ratios against what the cost curve
predicts, what the lookahead ratio means on this hardware (the cost of one wide step against
one narrow step), and why adaptive decoding fed what it fed. When a measured time disagrees
with its prediction by more than 1.5x the machine was busy, and the demo says so instead of
giving a verdict. The GPU figures committed in ``benchmarks/results_gpu`` are quoted when they
exist.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..fast.adaptive import AdaptiveDecoder
from ..fast.cost import CostModel
from ..fast.cost_cache import CostCache
from ..fast.policy import DraftPolicy
from ..greedy import greedy_decode
from ..models import chat_ids, load_default_model
from ..results import DecodeResult
from ..sources.lookahead import lookahead_decode
from .flops import ModelShape, decode_flops

DEFAULT_PROMPT = "Write a Python class for a stack with push, pop and peek methods."
CPU_CONFIG = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
AGREE = 1.5  # a measured time further than this factor from its prediction: the machine was busy
GPU_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results_gpu"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the demo subcommand."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message (sent through the chat template)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate (default 128)")
    parser.add_argument("--window", type=int, default=CPU_CONFIG.window_size, help="W, lookahead window size")
    parser.add_argument("--ngram", type=int, default=CPU_CONFIG.ngram_size, help="N, n-gram size")
    parser.add_argument("--candidates", type=int, default=CPU_CONFIG.max_candidates, help="G, candidates verified per step")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds; the fastest of each counts (default 3)")
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


def predicted_seconds(result: DecodeResult, cost: CostModel, prompt_tokens: int) -> float:
    """What `cost` says the call should take: the prefill, then each step's width at its KV length."""
    kv = prompt_tokens - 1  # the prefill caches the prompt but its last token, which the first step feeds
    seconds = cost.time(min(kv, cost.max_width), 0) if kv else 0.0
    for fed, accepted in zip(result.stats.forward_tokens_per_step, result.stats.accepted_per_step):
        seconds += cost.time(min(fed, cost.max_width), kv)
        kv += accepted
    return seconds


def agreement(measured: dict[str, float], predicted: dict[str, float]) -> str | None:
    """None when every measured time and speed-up is within `AGREE` of its prediction; else why not."""
    off = [f"{name} {measured[name]:.2f} s against {predicted[name]:.2f} s predicted" for name in measured
           if not 1 / AGREE <= measured[name] / predicted[name] <= AGREE]
    base = measured["greedy"] / predicted["greedy"]
    off += [f"{name}'s speed-up {measured['greedy'] / measured[name]:.2f}x against {predicted['greedy'] / predicted[name]:.2f}x"
            for name in measured if not 1 / AGREE <= (measured[name] / predicted[name]) / base <= AGREE]
    return "; ".join(off) or None


def verdict(model, result: DecodeResult, cost: CostModel, measured: float, predicted: float, kv: float) -> str:
    """What the time ratio means here: S against the cost of a wide step in narrow steps at KV
    length `kv`, then the `measured` speed-up of lookahead over greedy (which decides the last
    sentence) beside the one the cost curve `predicted` for these very steps."""
    q = min(round(result.stats.mean_forward_tokens), cost.max_width)
    ratio, s = cost.relative(q, kv), result.stats.compression
    line = (f"on this {model.device.type.upper()}: a {q}-token step costs {ratio:.1f} one-token steps "
            f"(t({q}) = {1e3 * cost.time(q, kv):.0f} ms, t(1) = {1e3 * cost.time(1, kv):.0f} ms), so lookahead wins only "
            f"where S > {ratio:.1f}; with S = {s:.2f} expect about {s / ratio:.2f}x (the curve, step by step: {predicted:.2f}x).")
    if measured < 1:
        return line + f" Measured: {measured:.2f}x, so here fixed-width lookahead is slower than greedy decoding."
    return line + f" Measured: {measured:.2f}x, so here lookahead decoding pays off."


def busy_notice(why: str, cache: CostCache) -> str:
    """What to trust when the timings disagree with the cost curve."""
    return (f"no speed verdict: the timings disagree with this machine's cost curve by more than {AGREE}x ({why}), so the "
            f"machine was busy while they ran or while the curve was measured. Trust what load cannot change: the "
            f"identical output, S and the tokens fed per step; rerun on an idle machine for the times (if it is idle now, "
            f"the stored curve was measured busy: delete {cache.path} and it is measured again).")


def budget_note(result: DecodeResult, max_new_tokens: int, eos: int | None) -> str:
    """A line saying the token budget, not the model, ended the text (empty when the model ended it)."""
    ids = result.token_ids
    if len(ids) < max_new_tokens or (ids and ids[-1] == eos):
        return ""
    return f"[... the {max_new_tokens}-token budget ended the text here; --max-new-tokens N for more]\n"


def adaptive_reasons(cost: CostModel, policy: DraftPolicy, result: DecodeResult, kv: float) -> str:
    """Two lines: the cost curve it weighed (at KV length `kv`), and the acceptance `policy` learned
    in the call that gave `result` (and what it then fed)."""
    stats = result.stats
    widths = [q for q in (2, 4, 8, 16, 32) if q <= cost.max_width]
    curve = ", ".join(f"t({q}) = {cost.relative(q, kv):.1f}" for q in widths)
    counts: dict[str, list[float]] = {}  # source -> [accepted, checked] of first draft tokens, every grade of evidence
    for (source, _, depth, rank), rate in policy.rates.items():
        if depth == 1 and rank == 0:
            seen = counts.setdefault(source, [0.0, 0.0])
            seen[0] += rate.accepted - policy.settings.prior[0]
            seen[1] += rate.reached - policy.settings.prior[1]
    rates = {s: f"{s} {a / n:.0%} of {int(n)} checks" for s, (a, n) in counts.items() if n}
    drafted = sum(d > 0 for d in stats.draft_tokens_per_step)
    windowed = sum(w > 0 for w in stats.window_tokens_per_step)
    return (f"  cost here, in one-token steps: {curve}: a draft pays only if it carries about {cost.relative(widths[0], kv) - 1:.1f}"
            f" more accepted tokens than none\n"
            f"  acceptance of each source's first draft token, checked on every step: {'; '.join(rates.values()) or 'none yet'}; "
            f"so it drafted on {drafted} of {stats.steps} steps (the window on {windowed}), {stats.mean_forward_tokens:.1f} tokens per step")


def timed_rounds(decoders: dict, prompt, max_new_tokens: int, repeats: int, tokenizer) -> dict[str, DecodeResult]:
    """Each decoder once untimed (warm-up), then `repeats` interleaved rounds; the fastest call of each."""
    for decode in decoders.values():
        decode(prompt, 8, None)
    best: dict[str, DecodeResult] = {}
    for r in range(repeats):
        print(f"  round {r + 1}/{repeats}:", end="", flush=True)
        for name, decode in decoders.items():
            result = decode(prompt, max_new_tokens, tokenizer)
            print(f" {name} {result.stats.wall_time_s:.1f} s", end=";" if name != "adaptive" else "\n", flush=True)
            if name not in best or result.stats.wall_time_s < best[name].stats.wall_time_s:
                best[name] = result
    return best


def run(args: argparse.Namespace) -> int:
    """Load the model, decode the prompt three ways, explain the comparison; 0 when outputs match."""
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, max_candidates=args.candidates)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    model, tokenizer = load_default_model(device=args.device)
    prompt = chat_ids(tokenizer, args.prompt)
    print(f"model: SmolLM2-135M-Instruct on {model.device} ({model.dtype}), torch threads: {torch.get_num_threads()}")
    print(f"prompt: {args.prompt!r} ({prompt.shape[1]} tokens); lookahead W={config.window_size} N={config.ngram_size} "
          f"G={config.max_candidates}: up to {config.max_step_tokens()} tokens per step", flush=True)
    print("[1/2] this machine's step cost t(q, kv), where adaptive_decode keeps it ...", end=" ", flush=True)
    cache, start = CostCache.default(), time.perf_counter()
    known = len(cache)
    decoder = AdaptiveDecoder(model, cache=cache)  # what adaptive_decode(model, ...) builds: the default cache
    cost, how = decoder.cost, "measured now" if len(cache) > known else "read"
    print(f"{how} in {time.perf_counter() - start:.1f} s ({cache.path})")
    print(f"[2/2] greedy, lookahead and adaptive decoding, a warm-up then {args.repeats} interleaved rounds", flush=True)
    learned: dict[int, DraftPolicy] = {}  # id(result) -> the policy of the adaptive call that returned it

    def adaptive(ids, n, tok):
        result = decoder(ids, n, tokenizer=tok)
        learned[id(result)] = decoder.policy  # a fresh policy per call: what this call learned
        return result

    runs = {"greedy": lambda ids, n, tok: greedy_decode(model, ids, n, tokenizer=tok),
            "lookahead": lambda ids, n, tok: lookahead_decode(model, ids, n, config=config, tokenizer=tok),
            "adaptive": adaptive}
    best = timed_rounds(runs, prompt, args.max_new_tokens, args.repeats, tokenizer)
    greedy, lookahead, adapted = best["greedy"], best["lookahead"], best["adaptive"]
    same = greedy.token_ids == lookahead.token_ids == adapted.token_ids
    shape, g, s = ModelShape.from_model(model), greedy.stats, lookahead.stats
    flops = decode_flops(shape, s, "lookahead", config).decode / decode_flops(shape, g, "greedy").decode
    print(f"\n--- output ({s.new_tokens} tokens; identical to greedy decoding: {'yes' if same else 'NO'}) ---\n{lookahead.text}")
    print(budget_note(lookahead, args.max_new_tokens, tokenizer.eos_token_id))
    print(f"tokens accepted per lookahead step:\n{histogram(lookahead)}")
    print(f"compression S = {s.compression:.2f} tokens per step: {s.steps} steps instead of greedy's {g.steps}")
    print(f"FLOPs: lookahead computed {flops:.1f}x greedy's FLOPs for the same tokens ({s.mean_forward_tokens:.1f} tokens per step)")
    measured = {name: r.stats.wall_time_s for name, r in best.items()}
    predicted = {name: predicted_seconds(r, cost, prompt.shape[1]) for name, r in best.items()}
    print("time (fastest round): " + ", ".join(f"{name} {measured[name]:.2f} s (curve: {predicted[name]:.2f} s)" for name in best)
          + f": lookahead {g.wall_time_s / s.wall_time_s:.2f}x and adaptive {g.wall_time_s / adapted.stats.wall_time_s:.2f}x "
          "greedy's speed")
    why = agreement(measured, predicted)
    if why is None:
        print(verdict(model, lookahead, cost, g.wall_time_s / s.wall_time_s, predicted["greedy"] / predicted["lookahead"],
                      prompt.shape[1] + s.new_tokens / 2))
    else:
        print(busy_notice(why, cache))
    print(f"adaptive decoding: S = {adapted.stats.compression:.2f}; why it fed what it fed:")
    print(adaptive_reasons(cost, learned[id(adapted)], adapted, prompt.shape[1] + adapted.stats.new_tokens / 2))
    print(gpu_expectation(config))
    return 0 if same else 1
