"""Where compiled adaptive decoding's time goes beside compiled greedy's, phase by phase (CPU, packages).

`CompiledDecoder` (greedy) and `CompiledAdaptiveDecoder` over the packages in COMPILE_DIR (one
static cache of 960 slots, built there on the first run: about 6 minutes) decode two Spec-Bench
prompts per task, 64 new tokens each, the two decoders alternating prompt by prompt. The engine's
eager driver (`ladref.batched.loop.EagerDriver.run_step`), the runner's forward pass and the step's
plan are clocked by wrapping them in this process (this script's instrumentation only). Reported:

* each decoder's wall time, split into its calls' first steps (the prompt's pass, uncompiled, with
  the first step's tokens: `ladref.fast.static.StaticRunner.prefill`, deferred) and the later steps;
* the adaptive decoder's later steps by kind: bare (nothing proposed), proposed but nothing fed,
  nodes fed; for each, how many, ms a step in all, of it the forward pass and the plan made for the
  next step (its proposing and choice), and tokens a step.

    python benchmarks/archive/compiled_cpu/phases.py COMPILE_DIR >> benchmarks/archive/compiled_cpu/phases.log
"""
from __future__ import annotations

import collections
import sys
import time

import torch

from ladref import CompiledAdaptiveDecoder, CompiledDecoder, load_default_model
from ladref.batched import loop
from ladref.batched.step import BatchStep
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.bench.runinfo import git_commit, machine
from ladref.fast.static import StaticRunner

MAX_LENGTH, NEW_TOKENS = 960, 64


def clock(seconds: collections.Counter, cls: type, name: str) -> None:
    """Wrap ``cls.name`` so that its calls add their wall time to ``seconds[name]``."""
    method = getattr(cls, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - start
    setattr(cls, name, timed)


def main() -> None:
    torch.set_num_threads(2)
    model, tokenizer = load_default_model()
    prompts = [t[0] for t in encode_prompts(tokenizer, load_prompts("specbench", limit=2))]
    adaptive = CompiledAdaptiveDecoder(model, max_lengths=MAX_LENGTH, compile_dir=sys.argv[1])
    greedy = CompiledDecoder(model, None, max_length=MAX_LENGTH, compile_dir=sys.argv[1])
    adaptive.warmup(), greedy.warmup()
    seconds, steps = collections.Counter(), []  # per step: (kind, seconds, its forward's, its plan's, tokens kept)
    clock(seconds, StaticRunner, "forward"), clock(seconds, BatchStep, "plan")
    run_step = loop.EagerDriver.run_step

    def clocked(self, state, step, within):
        kind = "bare" if self.plan is None else "nothing fed" if self.shape[0] == 0 and not self.shape[1] else "nodes fed"
        seconds.clear()
        start, before = time.perf_counter(), int(state.produced.sum())
        logged = run_step(self, state, step, within)
        steps.append((kind if step else "first", time.perf_counter() - start, seconds["forward"], seconds["plan"],
                      int(state.produced.sum()) - before))
        return logged
    loop.EagerDriver.run_step = clocked
    adaptive(prompts[0], 8), greedy(prompts[0], 8)  # first-call costs out of the clock
    walls, kinds = collections.Counter(), {"greedy": [], "adaptive": []}
    for ids in prompts:
        for name, decoder in (("greedy", greedy), ("adaptive", adaptive)):
            steps.clear()
            start = time.perf_counter()
            decoder(ids, NEW_TOKENS)
            walls[name] += time.perf_counter() - start
            kinds[name] += steps
    commit = git_commit() or "no git checkout"
    print(f"# {commit[:7]}{commit[40:]}: {machine(torch.device('cpu'))}, torch {torch.__version__}; "
          f"{len(prompts)} prompts, {NEW_TOKENS} new tokens, one cache of {MAX_LENGTH} slots")
    for name, rows in kinds.items():
        first = [r for r in rows if r[0] == "first"]
        later = [r for r in rows if r[0] != "first"]
        tokens = sum(r[4] for r in later)
        print(f"  {name:8s} wall {walls[name]:6.2f} s: first steps {sum(r[1] for r in first):5.2f} s; later steps "
              f"{sum(r[1] for r in later):5.2f} s, {len(later)} steps, {tokens} tokens, {1e3 * sum(r[1] for r in later) / tokens:5.2f} ms a token")
    for kind in ("bare", "nothing fed", "nodes fed"):
        rows = [r for r in kinds["adaptive"] if r[0] == kind]
        if rows:
            n = len(rows)
            print(f"  adaptive, {kind:11s}: {n:4d} steps, {1e3 * sum(r[1] for r in rows) / n:5.1f} ms a step (forward "
                  f"{1e3 * sum(r[2] for r in rows) / n:5.1f}, plan {1e3 * sum(r[3] for r in rows) / n:4.1f}), "
                  f"{sum(r[4] for r in rows) / n:4.2f} tokens a step")


if __name__ == "__main__":
    main()
