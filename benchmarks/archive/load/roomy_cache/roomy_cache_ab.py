"""A/B in one process: batched greedy over a cache whose layers have room to spare (`ladref.runner.RoomyLayer`,
new) against transformers' `DynamicLayer`, which concatenates the whole cache every pass (old).

A measurement script: for the old turns it rebinds ``new_cache`` in `ladref.runner` and `ladref.batch`
to a plain ``DynamicCache(config=...)`` (the library has no switch). float32 SmolLM2-135M, 2 threads,
the 12 Spec-Bench prompts of the load runs (2 per task), 32 new tokens: greedy over the first 4 one at
a time, then batched greedy over the first 4, 8 and all 12; the variants in turns, 5 rounds. Whole
calls, the prompts' prefill included. Its log: roomy_cache_ab.log.
"""
import statistics
import time

import torch
from transformers import DynamicCache

import ladref.batch as batch_module
import ladref.runner as runner_module
from ladref import greedy_decode, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts

NEW_CACHE = runner_module.new_cache


def use(variant: str) -> None:
    make = NEW_CACHE if variant == "new" else (lambda config: DynamicCache(config=config))
    runner_module.new_cache = batch_module.new_cache = make


if __name__ == "__main__":
    torch.set_num_threads(2)
    model, tok = load_default_model()
    ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", 2))]
    print(f"prompts of {[len(p) for p in ids]} tokens", flush=True)
    rates, outs = {}, {}
    for rnd in range(5):
        for variant in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
            use(variant)
            for size in (1, 4, 8, 12):
                start = time.perf_counter()
                if size == 1:
                    tokens = [greedy_decode(model, p, 32).token_ids for p in ids[:4]]
                else:
                    tokens = greedy_decode(model, ids[:size], 32).token_ids
                seconds = time.perf_counter() - start
                rate = sum(len(t) for t in tokens) / seconds
                outs.setdefault(size, tokens)
                rates.setdefault((size, variant), []).append(rate)
                print(f"round {rnd} {variant} B={size:2d} {seconds:6.1f} s {rate:6.2f} tok/s  same tokens as the first run: "
                      f"{tokens == outs[size]}", flush=True)
    use("new")
    print("median tokens/s (new / old):")
    for size in (1, 4, 8, 12):
        old, new = (statistics.median(rates[(size, v)]) for v in ("old", "new"))
        print(f"  B={size:2d}  old {old:6.2f}  new {new:6.2f}  new/old {new / old:.2f}")
