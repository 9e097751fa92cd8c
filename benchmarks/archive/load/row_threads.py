"""Why each row of a batch runs its torch work on one thread (`ladref.rows.row_threads`).

1. A forward pass of 2 rows (SmolLM2-135M, float32, 2 threads, 80 cached tokens) timed alone,
   beside 2 idle Python threads that never ran a torch op, beside 2 that ran two small ones on
   torch's default 2 threads (each then owns an OpenMP team), and beside 2 that ran them on one.
2. ladref's batched greedy (the first 8 Spec-Bench prompts of `load_prompts("specbench", 2)`, 32
   new tokens after the first) with and without `row_threads`, in turns: ms per pass after the
   prompts' prefill. A measurement script: "without" replaces `ladref.rows.row_threads` with a
   no-op for its turns; the library itself has no switch.

    python benchmarks/results/load/row_threads.py > benchmarks/results/load/row_threads.log
"""
import contextlib
import statistics
import threading
import time

import torch

torch.set_num_threads(2)
import ladref.rows as rows_module
from ladref import greedy_decode, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.runner import ModelFacts, cache_arg, forward_logits

model, tok = load_default_model()
ROW_THREADS = rows_module.row_threads


def pass_ms(cache, rows: int = 2, past: int = 80, reps: int = 8) -> float:
    name, facts, times = cache_arg(model), ModelFacts.of(model), []
    for _ in range(reps):
        inputs = {"input_ids": torch.randint(0, 1000, (rows, 1)), "position_ids": torch.full((rows, 1), past),
                  "attention_mask": torch.zeros(rows, 1, 1, past + 1), name: cache, "use_cache": True}
        with torch.inference_mode():
            start = time.perf_counter()
            forward_logits(model, facts, inputs, None)
            times.append(1e3 * (time.perf_counter() - start))
        cache.crop(-1)
    return statistics.median(times)


def beside_threads() -> None:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=torch.randint(0, 1000, (2, 80)), **{cache_arg(model): cache}, use_cache=True)
    print("1. a forward pass of 2 rows, median of 8 (ms):")
    print(f"   alone                                             {pass_ms(cache):6.1f}")
    for label, ops, threads in (("2 idle threads, no torch op", False, None), ("2 idle threads that ran torch ops on 2 threads", True, None),
                                ("2 idle threads that ran torch ops on 1 thread", True, 1)):
        done = threading.Event()

        def idle():
            if threads:
                torch.set_num_threads(threads)
            if ops:
                torch.randn(49152).argmax(), torch.randn(64, 64) @ torch.randn(64, 64)
            done.wait()

        workers = [threading.Thread(target=idle) for _ in range(2)]
        [w.start() for w in workers]
        time.sleep(0.2)
        print(f"   beside {label:43s} {pass_ms(cache):6.1f}")
        done.set()
        [w.join() for w in workers]
    torch.set_num_threads(2)


def batched_greedy(rounds: int = 3) -> None:
    ids = [p[0] for p in encode_prompts(tok, load_prompts("specbench", 2))][:8]
    print(f"\n2. batched greedy, prompts of {[len(p) for p in ids]} tokens: ms per pass after the prefill (32 passes)")
    times = {}
    for rnd in range(rounds):
        for variant in (("without", "with") if rnd % 2 == 0 else ("with", "without")):
            rows_module.row_threads = ROW_THREADS if variant == "with" else (lambda restore: contextlib.nullcontext())
            for size in (2, 4, 8):
                start = time.perf_counter()
                greedy_decode(model, ids[:size], 1)
                prefill = time.perf_counter() - start
                start = time.perf_counter()
                greedy_decode(model, ids[:size], 33)
                ms = 1e3 * (time.perf_counter() - start - prefill) / 32
                times.setdefault((size, variant), []).append(ms)
                print(f"   round {rnd} {variant:7s} row_threads  B={size}  {ms:6.1f}", flush=True)
    rows_module.row_threads = ROW_THREADS
    for size in (2, 4, 8):
        old, new = (statistics.median(times[(size, v)]) for v in ("without", "with"))
        print(f"   B={size}: without {old:6.1f} ms, with {new:6.1f} ms per pass: with/without {new / old:.2f}")


beside_threads()
batched_greedy()
