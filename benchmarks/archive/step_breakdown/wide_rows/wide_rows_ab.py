"""A/B in one process, the sides switched before every timed pass: the linear layers of a pass of
q rows computed as W @ x^T (`ladref.kernels.small_row_linear`) against ``F.linear`` as the model
calls it, for q = 1 to 16, through `ModelRunner` at KV 512 (median of 8 rounds, in turns).

It rebinds ``ladref.kernels.SMALL_ROWS`` (read at every pass) before each timed pass; the library
has no switch. `../wide_linears_ab.py` rebound it only when its runners were built, so both of
its sides ran with the last binding, the old one: its "no gain" for 6-64 rows compared the old
rows with themselves. Its log: wide_rows_ab.log.

    python benchmarks/results/step_breakdown/wide_rows/wide_rows_ab.py > benchmarks/results/step_breakdown/wide_rows/wide_rows_ab.log
"""
import statistics
import time

import torch

torch.set_num_threads(2)
import ladref.kernels as kernels
from ladref import load_default_model
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

SIDES = {"F.linear": range(1, 2), "W @ x^T": range(1, 17)}  # one row keeps W @ [x; 0]^T on both sides
WIDTHS, KV, ROUNDS = tuple(range(1, 17)), 512, 9
LIBRARY = kernels.SMALL_ROWS


def main() -> None:
    model, _ = load_default_model("cpu", torch.float32)
    runner = ModelRunner(model)
    runner.prefill(torch.arange(KV + 1) % 1000 + 5, DecodeStats())
    times: dict[tuple[int, str], list[float]] = {}
    for rnd in range(ROUNDS):
        for q in WIDTHS:
            for side in (tuple(SIDES) if rnd % 2 else tuple(SIDES)[::-1]):
                kernels.SMALL_ROWS = SIDES[side]
                start = time.perf_counter()
                runner.forward(torch.arange(q) + 100, None, torch.ones(q, q, dtype=torch.bool).tril_())
                seconds = time.perf_counter() - start
                runner.commit(KV, torch.zeros(0, dtype=torch.long))
                if rnd:  # the first round warms up
                    times.setdefault((q, side), []).append(seconds)
    print(f"# a pass of q rows, its linear layers as W @ x^T against F.linear, the sides in turns\n# torch {torch.__version__}, "
          f"2 threads, float32 SmolLM2-135M, KV {KV}, median of {ROUNDS - 1} rounds (ms); the library's SMALL_ROWS: "
          f"{LIBRARY.start}-{LIBRARY.stop - 1}")
    for q in WIDTHS:
        a, b = (1e3 * statistics.median(times[(q, s)]) for s in SIDES)
        print(f"  q={q:3d}  F.linear {a:6.1f}  W @ x^T {b:6.1f}  W @ x^T / F.linear {b / a:.2f}", flush=True)


if __name__ == "__main__":
    main()
