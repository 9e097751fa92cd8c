"""``python -m ladref demo``: greedy, lookahead and adaptive decoding on the embedded SmolLM2 model.

First a probe (`ladref.bench.demo_rounds`): a few one-token greedy steps, timed, say whether this
machine is steady now, and say so on screen at once when it is busy (where other processes hold
the cores, it goes on with fewer torch threads: a thread waiting for a core holds up every step).
Then this machine's step-cost curve t(q, kv), where `adaptive_decode` takes it (the user's cost
cache: measured on the first run on a steady machine, read on every later one; a busy machine
without one measures a small curve for this run only, never kept). Then it decodes one prompt
three ways, interleaved over at most `--repeats` rounds after a warm-up, and stops once two
rounds' speed-ups agree within 5%, or before the demo's time limit: about 2 minutes on a steady
machine (a first run, which measures the curve, decodes fewer tokens to keep it), under 5 on a
busy one, where it also decodes fewer tokens. It explains what it measured: the output
(identical), how many tokens each lookahead step accepted, the compression S, the FLOPs spent,
the fastest round's times against what the cost curve predicts, the speed-up of every round, what
the lookahead ratio means on this hardware, and why adaptive decoding fed what it fed
(`ladref.bench.demo_verdict`). It gives no speed verdict from one round, from rounds whose
speed-ups spread more than 10%, or from times more than 1.5x off their prediction, and qualifies
one measured on a machine the probe found busy. It ends with where the repository's GPU results are.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..fast.adaptive import AdaptiveDecoder, kv_lengths_for
from ..pricing.cost import CostModel
from ..pricing.cost_cache import CostCache
from ..pricing.surface import surface_key
from ..batched.policy import BatchPolicy
from ..decoders.greedy import greedy_decode
from ..models import chat_ids, load_default_model
from ..results import DecodeResult
from ..decoders.methods import lookahead_decode
from .demo_rounds import BUSY_LIMIT_S, DEFAULT_TOKENS, QUIET_LIMIT_S, Decode, Probe, Rounds, StepTimes, busy_now, plan_tokens
from .demo_rounds import probe, steadiness, thread_fit, timed_rounds
from .demo_verdict import adaptive_reasons, agreement, predicted_seconds, verdict, withheld
from .flops import ModelShape, decode_flops

DEFAULT_PROMPT = "Write a Python class for a stack with push, pop and peek methods."
CPU_CONFIG = LookaheadConfig(window_size=4, ngram_size=4, max_candidates=4)
GPU_RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results_gpu"
GPU_DOCS = "docs/gpu.md and benchmarks/results_gpu/summary.md"
FIRST_GRACE_S = 20.0  # on a busy machine the first round may run this far past the time limit, no further
BUSY_WIDTHS = (1, 2, 4, 8, 16, 32)  # the curve measured for one run on a busy machine, at one KV length


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the demo subcommand."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="user message (sent through the chat template)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="tokens to generate (default 64, fewer on a busy or slow machine to keep the time limit)")
    parser.add_argument("--window", type=int, default=CPU_CONFIG.window_size, help="W, lookahead window size")
    parser.add_argument("--ngram", type=int, default=CPU_CONFIG.ngram_size, help="N, n-gram size")
    parser.add_argument("--candidates", type=int, default=CPU_CONFIG.max_candidates, help="G, candidates verified per step")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved timed rounds at most; two that agree within 5%% end them (default 3)")
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda when available)")


def histogram(result: DecodeResult, width: int = 40) -> str:
    """Tokens accepted per step, one text bar per count (1..N)."""
    counts = Counter(result.stats.accepted_per_step)
    top = max(counts.values())
    return "\n".join(f"  {k} token{'s' if k > 1 else ' '} {'#' * max(1, round(width * n / top)):<{width}} {n} steps"
                     for k, n in sorted(counts.items()))


def gpu_expectation(results: Path = GPU_RESULTS) -> str:
    """One line on what a GPU gives, quoting the lookahead rows of the GPU runs in `results` when they are there."""
    line = ("on a GPU: an eager step of 1 or of 256 tokens cost about the same on an H200 (kernel launches set its "
            "time); under CUDA graphs a 121-token step cost 1.7-1.8 one-token steps, so expect S t(1)/t(q), below S-fold")
    rows, machines = [], set()
    for path in sorted(results.glob("*.json")):
        payload = json.loads(path.read_text())
        for s in payload.get("summary", []):
            if s["method"].startswith("lookahead"):
                rows.append(f"{payload['meta'].get('dataset', path.stem)} {s['method']}: S={s['compression']:.2f}, "
                            f"{s['speedup']:.2f}x greedy")
                machines.add(payload["meta"].get("machine", "a GPU"))
    if rows:
        return line + f"; the repository's GPU runs ({', '.join(sorted(machines))}; {GPU_DOCS}): " + "; ".join(rows[:3])
    return line + f"; the repository's GPU runs, and what they measured: {GPU_DOCS}"


def budget_note(result: DecodeResult, max_new_tokens: int, eos: int | None) -> str:
    """A line saying the token budget, not the model, ended the text (empty when the model ended it)."""
    ids = result.token_ids
    if len(ids) < max_new_tokens or (ids and ids[-1] == eos):
        return ""
    return f"[... the {max_new_tokens}-token budget ended the text here; --max-new-tokens N for more]\n"


def adaptive_decoder(model, busy: bool, kv: int) -> tuple[AdaptiveDecoder, str]:
    """What `adaptive_decode(model, ...)` builds (the user's cost cache, read or measured and kept), and how
    its curve came; on a `busy` machine without a stored curve, a small one at KV length `kv`, for this run only."""
    cache, start = CostCache.default(), time.perf_counter()
    if busy and surface_key(model, 1, kv_lengths=kv_lengths_for(model)) not in cache.models:
        cost = CostModel.measure(model, BUSY_WIDTHS, (kv,), repeats=3)
        return (AdaptiveDecoder(model, cost=cost, calibrate=True),
                f"measured now in {time.perf_counter() - start:.1f} s, widths {BUSY_WIDTHS[0]}-{BUSY_WIDTHS[-1]} at KV length "
                f"{kv}, for this run only (a curve measured on a busy machine is not kept in {cache.path})")
    known = len(cache)
    decoder = AdaptiveDecoder(model, cache=cache)
    decoder.surface_for(1)  # one prompt's passes: read, or measured now and kept
    return decoder, f"{'measured now' if len(cache) > known else 'read'} in {time.perf_counter() - start:.1f} s ({cache.path})"


def probe_machine(model, greedy: Decode, prompt: torch.Tensor) -> tuple[Probe, list[str]]:
    """Step 1: the probe, said at once; on a CPU whose threads waited for cores, fewer threads from then on
    (`thread_fit`), probed again. The probe to plan with, and why the machine looks busy (the first probe's reasons)."""
    cpu = model.device.type == "cpu"
    print("[1/3] is this machine steady now? up to 16 one-token greedy steps (8 s at most), timed ...", end=" ", flush=True)
    found = probe(greedy, prompt, threads=torch.get_num_threads() if cpu else None)
    why = found.busy(None)
    print(steadiness(found, why, model.device), flush=True)
    fewer = thread_fit(found, torch.get_num_threads())
    if cpu and fewer < torch.get_num_threads():
        torch.set_num_threads(fewer)
        print(f"  a thread that waits for a core holds up every step, so the demo goes on with {fewer} torch "
              f"thread{'s' if fewer > 1 else ''}; probed again ...", end=" ", flush=True)
        found = probe(greedy, prompt, threads=fewer)
        print(steadiness(found, found.busy(None), model.device), flush=True)
    return found, why


def run(args: argparse.Namespace) -> int:
    """Load the model, probe the machine, decode the prompt three ways, explain the comparison; 0 when outputs match.
    The torch thread count is restored at the end (the probe may lower it on a busy CPU)."""
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, max_candidates=args.candidates)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise SystemExit(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    start, threads = time.perf_counter(), torch.get_num_threads()
    model, tokenizer = load_default_model(device=args.device)
    prompt = chat_ids(tokenizer, args.prompt)
    print(f"model: SmolLM2-135M-Instruct on {model.device} ({model.dtype}), torch threads: {threads}")
    print(f"prompt: {args.prompt!r} ({prompt.shape[1]} tokens); lookahead W={config.window_size} N={config.ngram_size} "
          f"G={config.max_candidates}: up to {config.max_step_tokens()} tokens per step", flush=True)
    try:
        return compare(args, config, model, tokenizer, prompt, start)
    finally:
        torch.set_num_threads(threads)


def compare(args: argparse.Namespace, config: LookaheadConfig, model, tokenizer, prompt: torch.Tensor, start: float) -> int:
    """Steps 1 to 3 (probe, cost curve, interleaved rounds) and the explanation, within the time limit counted from `start`."""
    runs = {"greedy": lambda ids, n, tok, out: greedy_decode(model, ids, n, tokenizer=tok, streamer=out),
            "lookahead": lambda ids, n, tok, out: lookahead_decode(model, ids, n, config=config, tokenizer=tok, streamer=out)}
    found, why = probe_machine(model, runs["greedy"], prompt)
    print("[2/3] this machine's step cost t(q, kv), where adaptive_decode keeps it ...", end=" ", flush=True)
    decoder, how = adaptive_decoder(model, bool(why), 128)
    print(how, flush=True)
    expected = decoder.cost.time(1, prompt.shape[1])
    busy = list(dict.fromkeys(why + found.busy(expected)))
    if decoder.cost_cache is not None and found.step_s < expected / 1.5:
        print(f"a one-token step took {1e3 * found.step_s:.0f} ms now against {1e3 * expected:.0f} ms in the cost curve: it was "
              f"measured while the machine was busy, so the times below will disagree with it (delete {decoder.cost_cache.path} "
              "and the next run measures it again)")
    deadline = start + (BUSY_LIMIT_S if busy else QUIET_LIMIT_S)
    tokens = plan_tokens(args.max_new_tokens, bool(busy), found.step_s, deadline - time.perf_counter())
    repeats = min(args.repeats, 2) if busy else args.repeats
    if busy:
        print(busy_now(busy, tokens, repeats), flush=True)
    elif tokens < DEFAULT_TOKENS and args.max_new_tokens is None:
        print(f"{tokens} tokens rather than {DEFAULT_TOKENS}, to end within about {QUIET_LIMIT_S / 60:.0f} minutes "
              f"({time.perf_counter() - start:.0f} s are gone{', most to the curve, measured once' if 'measured now' in how else ''})")
    learned: dict[int, BatchPolicy] = {}  # id(result) -> the policy of the adaptive call that returned it

    def adaptive(ids, n, tok, out):
        result = decoder(ids, n, tokenizer=tok, streamer=out)
        learned[id(result)] = decoder.policy  # a fresh policy per call: what this call learned
        return result

    runs["adaptive"] = adaptive
    print(f"[3/3] greedy, lookahead and adaptive decoding, {tokens} tokens each: a warm-up, then at most {repeats} "
          "interleaved rounds", flush=True)
    for name in ("lookahead", "adaptive"):  # greedy's warm-up was the probe
        runs[name](prompt, 8, None, StepTimes())
    rounds = timed_rounds(runs, prompt, tokens, repeats, deadline, tokenizer=tokenizer,
                          first_deadline=start + BUSY_LIMIT_S + FIRST_GRACE_S if busy else math.inf)
    print(f"  rounds end: {rounds.stop} (the demo ran {time.perf_counter() - start:.0f} s so far)")
    if not rounds.times:
        print(f"this machine is too busy for the demo now: not even one round ended within {BUSY_LIMIT_S + FIRST_GRACE_S:.0f} s; "
              "rerun it when the machine is idle.")
        return 0
    return explain(model, tokenizer, config, prompt, rounds, decoder, learned, tokens, busy)


def explain(model, tokenizer, config: LookaheadConfig, prompt: torch.Tensor, rounds: Rounds, decoder: AdaptiveDecoder,
            learned: dict[int, BatchPolicy], tokens: int, busy: list[str]) -> int:
    """Print what the fastest round measured and what it means; 0 when the three outputs are identical."""
    fastest = rounds.fastest()
    best, cost = rounds.results[fastest], decoder.cost
    greedy, lookahead, adapted = best["greedy"], best["lookahead"], best["adaptive"]
    same = all(r["greedy"].token_ids == r["lookahead"].token_ids == r["adaptive"].token_ids for r in rounds.results)
    shape, g, s = ModelShape.from_model(model), greedy.stats, lookahead.stats
    flops = decode_flops(shape, s, "lookahead", config).decode / decode_flops(shape, g, "greedy").decode
    print(f"\n--- output ({s.new_tokens} tokens; identical to greedy decoding: {'yes' if same else 'NO'}) ---\n{lookahead.text}")
    print(budget_note(lookahead, tokens, tokenizer.eos_token_id))
    print(f"tokens accepted per lookahead step:\n{histogram(lookahead)}")
    print(f"compression S = {s.compression:.2f} tokens per step: {s.steps} steps instead of greedy's {g.steps}")
    print(f"FLOPs: lookahead computed {flops:.1f}x greedy's FLOPs for the same tokens ({s.mean_forward_tokens:.1f} tokens per step)")
    measured = {name: r.stats.wall_time_s for name, r in best.items()}
    predicted = {name: predicted_seconds(r, cost, prompt.shape[1]) for name, r in best.items()}
    print(f"time (round {fastest + 1}, the fastest): " + ", ".join(f"{name} {measured[name]:.2f} s (curve: {predicted[name]:.2f} s)"
                                                                 for name in best)
          + f": lookahead {g.wall_time_s / s.wall_time_s:.2f}x and adaptive {g.wall_time_s / adapted.stats.wall_time_s:.2f}x "
          "greedy's speed")
    if len(rounds.times) > 1:
        print("speed-up in each round: " + "; ".join(f"{name} " + ", ".join(f"{x:.2f}x" for x in rounds.ratios(name))
                                                     for name in ("lookahead", "adaptive"))
              + f" (they differ by up to {rounds.spread() - 1:.0%})")
    why = withheld(rounds, agreement(measured, predicted), None if decoder.cost_cache is None else decoder.cost_cache.path)
    if why is not None:
        print(why)
    else:
        line = verdict(model, lookahead, cost, g.wall_time_s / s.wall_time_s, predicted["greedy"] / predicted["lookahead"],
                       prompt.shape[1] + s.new_tokens / 2)
        print(("the probe found this machine busy, but the rounds held steady and matched the cost curve, so take "
               "this as likely, not settled: " if busy else "") + line)
    print(f"adaptive decoding: S = {adapted.stats.compression:.2f}; why it fed what it fed:")
    print(adaptive_reasons(cost, learned[id(adapted)], adapted, prompt.shape[1] + adapted.stats.new_tokens / 2))
    print(gpu_expectation())
    return 0 if same else 1
