"""The captured batched step on the real model, one prompt at a time: SmolLM2-135M-Instruct on Spec-Bench prompts
(the first `--per-task` of each of its six tasks), captured decoders against `CompiledDecoder`'s compiled
greedy (each compiled once, out of the clock), interleaved prompt by prompt.

    python scripts/captured_specbench.py --per-task 10 >> benchmarks/archive/captured_step/captured_specbench_cpu.log

`--dataset humaneval --per-task 40`: the first 40 HumanEval prompts instead, in order (a memory of
earlier outputs has more to offer there).

Decoders (`--decoders`): "compiled greedy" (the baseline, always run), "captured greedy", "captured
lookahead" (4/4/4), "captured prompt lookup", "captured prompt lookup + memory" (the same with a
`SuffixMemory` of the earlier prompts' outputs, searched on the device), and "captured adaptive": prompt lookup, the lookahead window
7/4/7 and Token Recycling (`ladref.fast.adaptive.default_proposers`), chosen by the batch policy on the
cost curve `--cost` (default: its own programs, timed once compiled), over the captured node counts `--widths`;
"captured adaptive + memory" is the same with prompt lookup's memory.

Prints, per decoder: tokens/s over all prompts (prefill included), ms a step, tokens a step, its
speedup over compiled greedy, how many outputs equal compiled greedy's, and, for a captured
decoder, the host's time between two of its compiled steps (the loop, the log's row, the reads:
every gap between the end of one program call and the start of the next inside a call, clocked
by wrapping the decoder's program in this process), then each captured program's ms a step by
its shape (draft nodes, window): the cost of the steps a policy chooses among.
"""

from __future__ import annotations

import argparse
import time

import torch

from ladref import (CapturedBatchDecoder, CompiledDecoder, LookaheadConfig, LookaheadProposer, PromptLookupProposer, SuffixMemory,
                    load_default_model)
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.runinfo import git_commit
from ladref.fast.adaptive import default_proposers
from ladref.pricing.cost import CostModel
from ladref.pricing.surface import CostSurface

SOURCES = {"captured greedy": lambda model: [], "captured lookahead": lambda model: [LookaheadProposer(LookaheadConfig(4, 4, 4))],
           "captured prompt lookup": lambda model: [PromptLookupProposer(4)],
           "captured prompt lookup + memory": lambda model: [PromptLookupProposer(4, memory=SuffixMemory())],
           "captured adaptive": default_proposers,
           "captured adaptive + memory": lambda model: [PromptLookupProposer(memory=SuffixMemory())] + default_proposers(model)[1:]}


class Clocked:
    """A callable that keeps the (start, end) time of every call of the one it wraps, and the time
    spent in it by program shape (its ``nodes`` and ``window`` arguments)."""

    def __init__(self, fn) -> None:
        self.fn, self.calls, self.by_shape = fn, [], {}

    def __call__(self, step, state, plan, nodes, window, *rest):
        start = time.perf_counter()
        out = self.fn(step, state, plan, nodes, window, *rest)
        self.calls.append((start, time.perf_counter()))
        total, count = self.by_shape.get((nodes, window), (0.0, 0))
        self.by_shape[(nodes, window)] = (total + self.calls[-1][1] - start, count + 1)
        return out

    def gaps(self) -> list[float]:
        """The host's time between consecutive calls, then forgets them (one decoder call's)."""
        gaps = [b[0] - a[1] for a, b in zip(self.calls, self.calls[1:])]
        self.calls = []
        return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="specbench", help="specbench, or another of ladref.bench.datasets (e.g. humaneval)")
    parser.add_argument("--per-task", type=int, default=1, help="prompts of each Spec-Bench task (10: all 60 committed); "
                        "another dataset: its first N")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mode", default="default")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--steps-per-read", type=int, default=1)
    parser.add_argument("--decoders", default="captured greedy,captured adaptive", help=f"comma-separated, of {sorted(SOURCES)}")
    parser.add_argument("--cost", default="captured", help="the adaptive decoder's t(q, kv): a cost JSON (eager passes), or "
                        "'captured': its own programs timed after compiling (CapturedBatchDecoder.measure)")
    parser.add_argument("--widths", default="0,2,4,8,16", help="the adaptive decoder's captured node counts")
    args = parser.parse_args()
    commit = git_commit()  # the code this run measures (read before it, not after)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_default_model()
    ids = [t[0] for t in encode_prompts(tokenizer, load_prompts(args.dataset, limit=args.per_task))]
    surface = CostSurface.of(CostModel.flat(64) if args.cost == "captured" else CostModel.load(args.cost))
    widths = [int(w) for w in args.widths.split(",")]
    decoders = {"compiled greedy": CompiledDecoder(model, None, max_length=args.max_length, mode=args.mode)}
    for name in args.decoders.split(","):
        adaptive = {"cost": surface, "widths": widths} if name.startswith("captured adaptive") else {}
        decoders[name] = CapturedBatchDecoder(model, SOURCES[name](model), max_length=args.max_length, mode=args.mode,
                                              steps_per_read=args.steps_per_read, **adaptive)
    compile_s = {}
    for name, decoder in decoders.items():  # compile, out of the clock (adaptive: the widths its warm-up prompt used)
        start = time.perf_counter()
        decoder(ids[0], 16) if isinstance(decoder, CompiledDecoder) else decoder.capture([ids[0]])
        compile_s[name] = time.perf_counter() - start
        print(f"{name}: compiled in {compile_s[name]:.0f} s", flush=True)
        if name.startswith("captured adaptive") and args.cost == "captured":
            decoder.cost = decoder.measure([ids[0]])
            curve = decoder.cost.at(1).curve(args.max_length)  # a staircase: print where it steps
            print(f"{name}: its programs' t(q), ms, up to q: "
                  + ", ".join(f"{q}: {1e3 * t:.1f}" for q, t in enumerate(curve, 1) if q == len(curve) or curve[q] != t), flush=True)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    clocks = {n: Clocked(d.program) for n, d in decoders.items() if isinstance(d, CapturedBatchDecoder)}
    for name, clocked in clocks.items():
        decoders[name].program = clocked
    host = {n: [] for n in clocks}
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
                host[name] += clocks[name].gaps()
            seconds[name] += time.perf_counter() - start
            tokens[name] += len(result.token_ids)
            outputs[name].append(result.token_ids)
    print(f"cpu  SmolLM2-135M-Instruct float32, torch {torch.__version__}, {args.threads} threads, mode {args.mode}, "
          f"{len(ids)} {args.dataset} prompts, {args.new_tokens} new tokens, max_length {args.max_length}, "
          f"k = {args.steps_per_read}, adaptive widths {widths} priced on {args.cost}; commit {commit}")
    print(f"programs compiled inside the timed calls: {torch._dynamo.utils.counters['stats']['unique_graphs'] - graphs}")
    print("| decoder | tokens/s | ms a step | tokens a step | x compiled greedy | equal to compiled greedy | compile s | "
          "host ms between steps |")
    print("|---|---|---|---|---|---|---|---|")
    base = tokens["compiled greedy"] / seconds["compiled greedy"]
    for name in decoders:
        rate = tokens[name] / seconds[name]
        equal = sum(a == b for a, b in zip(outputs[name], outputs["compiled greedy"]))
        print(f"| {name} | {rate:.1f} | {1e3 * seconds[name] / steps[name]:.2f} | {tokens[name] / steps[name]:.2f} | "
              f"{rate / base:.2f}x | {equal}/{len(ids)} | {compile_s[name]:.0f} | "
              f"{1e3 * sum(host[name]) / len(host[name]) if host.get(name) else float('nan'):.3f} |", flush=True)
    for name, clocked in clocks.items():  # the compiled programs (a call's first step runs uncompiled)
        print(f"{name}: ms a compiled step by program (draft nodes, window): "
              + ", ".join(f"{shape}: {1e3 * t / n:.1f} ({n} steps)" for shape, (t, n) in sorted(clocked.by_shape.items())))


if __name__ == "__main__":
    main()
