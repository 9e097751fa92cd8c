"""A compiled call's start, timed both ways in one process: the prompt cached in an uncompiled pass
of its own and then the first step compiled (before), against the prompt deferred into the first
step's pass, which runs uncompiled at its own width (now; `StaticRunner.prefill(defer=True)`).

float32 SmolLM2-135M on this CPU, a `StaticRunner` of 1,024 slots whose one width (8) is compiled
("default" mode, in this process); prompts of P tokens, a first step of 8 tokens under a causal
mask. Median of 7 rounds after one, the two ways in turns. Its log: deferred_first_step.log.
"""
import statistics
import time

import torch

from ladref import DecodeStats, load_default_model
from ladref.fast.static import StaticRunner

torch.set_num_threads(2)
model, _ = load_default_model()
runner = StaticRunner(model, 1024, compile_mode="default", widths=(8,))
print(f"compiled width 8 in {runner.compile():.1f} s", flush=True)
step = torch.arange(8) + 300
times, logits = {}, {}
for rnd in range(8):
    for length in (50, 200, 700):
        prompt = torch.arange(length) % 997 + 11
        for defer in ((False, True) if rnd % 2 else (True, False)):
            start = time.perf_counter()
            runner.prefill(prompt, DecodeStats(), defer=defer)
            out = runner.forward(step)  # (8, V)
            seconds = time.perf_counter() - start
            runner.commit(length - 1, torch.zeros(1, dtype=torch.long))
            logits[(length, defer)] = out
            if rnd:
                times.setdefault((length, defer), []).append(seconds)
print("prompt + first step of 8 tokens, ms (median of 7 in turns):")
for length in (50, 200, 700):
    apart, deferred = (1e3 * statistics.median(times[(length, d)]) for d in (False, True))
    gap = (logits[(length, True)] - logits[(length, False)]).abs().max().item()
    print(f"  P={length:4d}  apart {apart:7.1f}  deferred {deferred:7.1f}  saved {apart - deferred:6.1f}  "
          f"same argmax: {bool((logits[(length, True)].argmax(-1) == logits[(length, False)].argmax(-1)).all())}  "
          f"max |logit gap| {gap:.1e}")
