"""Where a compiled adaptive step's time goes besides its forward pass (CPU, packages loaded).

`CompiledAdaptiveDecoder` over the packages in COMPILE_DIR (max_lengths 512 and 1404, as the
Spec-Bench compiled rows build them) decodes one Spec-Bench prompt per task, 128 new tokens.
The runner's and the draft policy's and sources' methods are clocked by wrapping them in this
process (this script's instrumentation only; nested calls are counted in each of them), and
each is reported in ms per step beside the whole step's.

    python scripts/compiled_host_work.py COMPILE_DIR >> benchmarks/archive/compiled_cpu/host_work.log
"""
from __future__ import annotations

import subprocess
import sys
import time

import torch

from ladref import load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.compiled_adaptive import CompiledAdaptiveDecoder
from ladref.batched.policy import BatchPolicy
from ladref.batched.sources.lookahead import BatchLookahead
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.batched.sources.recycling import BatchRecycling
from ladref.batched.step import BatchStep
from ladref.fast.static import StaticRunner

CLOCKED = [(StaticRunner, "forward"), (StaticRunner, "commit"), (BatchPolicy, "choose"), (BatchPolicy, "may_draft"),
           (BatchPolicy, "search"), (BatchPolicy, "times"), (BatchPolicy, "observe"), (BatchStep, "plan"),
           (BatchRecycling, "propose"), (BatchRecycling, "learn"), (BatchPromptLookup, "propose"), (BatchLookahead, "propose")]


def clock(seconds: dict[str, float]) -> None:
    """Wrap every method of `CLOCKED` so that its calls add their wall time to `seconds`."""
    for cls, name in CLOCKED:
        method, label = getattr(cls, name), f"{cls.__name__}.{name}"

        def timed(self, *args, _method=method, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _method(self, *args, **kwargs)
            finally:
                seconds[_label] = seconds.get(_label, 0.0) + time.perf_counter() - start
        setattr(cls, name, timed)


def main() -> None:
    torch.set_num_threads(2)
    model, tokenizer = load_default_model()
    ids = [t[0] for t in encode_prompts(tokenizer, load_prompts("specbench", limit=1))]
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(512, 1404), compile_dir=sys.argv[1])
    decoder.warmup()
    decoder(ids[0], 8)  # first-call costs out of the clock
    seconds: dict[str, float] = {}
    clock(seconds)
    total, steps, tokens = 0.0, 0, 0
    for x in ids:
        start = time.perf_counter()
        result = decoder(x, 128)
        total += time.perf_counter() - start
        steps, tokens = steps + result.stats.steps, tokens + len(result.token_ids)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = " + changes" if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "ladref"]).returncode else ""
    print(f"# {commit}{dirty}: {len(ids)} prompts, {steps} steps, S {tokens / steps:.2f}, {1e3 * total / steps:.2f} ms a step")
    for label, value in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"  {label:30s} {1e3 * value / steps:7.3f} ms/step")


if __name__ == "__main__":
    main()
