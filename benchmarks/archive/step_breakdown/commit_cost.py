"""What one commit costs: the packed commit (k accepted tokens, uncompiled) against the earlier one
(layer by layer, 64 padded slots), uncompiled and compiled. Float32 SmolLM2-135M, a 512-slot
StaticRunner, 100 cached tokens, 2 threads; medians of 300 commits. Its log: commit_cost.log.

A measurement script: the earlier commit is rebuilt here from `ladref.runner` primitives.
"""
import statistics
import time

import torch

from ladref import load_default_model
from ladref.fast.compiling import compile_own
from ladref.fast.static import StaticRunner
from ladref.results import DecodeStats
from ladref.runner import gather_static_slots, set_static_length


def earlier_commit(runner, src, dst, length):
    gather_static_slots(runner.cache, src, dst)
    set_static_length(runner.cache, length)


def median_ms(commit, accepted) -> float:
    times = []
    for _ in range(300):
        start = time.perf_counter()
        commit(90, accepted)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_default_model()
    runner = StaticRunner(model, 512, widths=(1, 8, 64))
    runner.prefill(torch.arange(101), DecodeStats())
    for k in (1, 3, 8):
        print(f"packed commit, {k} token(s): {median_ms(runner.commit, torch.arange(k)):.3f} ms")
    for mode in (None, "max-autotune"):
        fn = compile_own(earlier_commit, f"earlier_{mode}", mode, runner.device)

        @torch.inference_mode()
        def commit(past_len, accepted, fn=fn):
            k, slots = accepted.shape[0], 64
            padded = torch.cat([accepted, accepted[-1:].expand(slots - k)])
            dst = (past_len + torch.arange(slots)).clamp_(max=runner.max_length - 1)
            fn(runner, past_len + padded, dst, torch.tensor(past_len + k))

        start = time.perf_counter()
        commit(90, torch.arange(3))
        print(f"earlier commit ({mode or 'uncompiled'}), first call {time.perf_counter() - start:.1f} s; "
              f"3 tokens in 64 slots: {median_ms(commit, torch.arange(3)):.3f} ms")


if __name__ == "__main__":
    main()
