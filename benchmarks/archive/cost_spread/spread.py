"""How much the ratios t(q) / t(1) of a start-up cost surface move from one measurement to the next,
kept as the median or as the fastest of a cell's passes.

Measures `CostSurface.measure(model, (1, 4, 12), BATCH_WIDTHS, (128, 512), repeats=5)` three times
in one process (SmolLM2-135M float32, 2 torch threads), keeping every pass, then works out each
estimator from the same passes: the median or the minimum of the last 3 passes of a cell (what
``repeats=3``, the load benchmark's setting, would have timed) or of all 5. Its spread: for each
(B, kv), the largest minus the smallest t(q) / t(1) over the three measurements, averaged over
q = 2-12 (the widths 2, 3, 4, 5, 6, 8, 12). Run at 46be11d + changes (the ``_run_plan`` it
replaces is that commit's), on a quiet machine:

    python benchmarks/archive/cost_spread/spread.py > benchmarks/archive/cost_spread/spread.log
"""

import statistics
import sys
import time

import torch

from ladref.bench.local_model import load_bench_model
from ladref.pricing import timing
from ladref.pricing.surface import BATCH_WIDTHS, CostSurface

BATCHES, KV, REPEATS, MEASUREMENTS = (1, 4, 12), (128, 512), 5, 3
ESTIMATORS = {"median of 3": lambda s: statistics.median(s[-3:]), "fastest of 3": lambda s: min(s[-3:]),
              "median of 5": statistics.median, "fastest of 5": min}


def measure_all(model) -> list:
    """[measurement][B][kv][q] -> the passes of that cell, in the order timed."""
    kept, measurements = [], []

    def plan(widths, kv_lengths, repeats, timed, progress):  # `timing._run_plan`'s plan, every pass kept
        top = max(kv_lengths) + repeats
        order = [(top, None)] + sorted(((kv + r, i) for i, kv in enumerate(kv_lengths) for r in range(repeats)), reverse=True)
        samples = [[[] for _ in widths] for _ in kv_lengths]
        for length, row in order:
            for j, q in enumerate(widths):
                seconds = timed(length, q)
                if row is not None:
                    samples[row][j].append(seconds)
        kept.append(samples)
        return [[statistics.median(t) for t in row] for row in samples]

    timing._run_plan = plan  # this script's instrument, not the library's
    for m in range(MEASUREMENTS):
        kept.clear()
        start = time.time()
        CostSurface.measure(model, BATCHES, BATCH_WIDTHS, KV, repeats=REPEATS)
        measurements.append([list(b) for b in kept])
        print(f"# measurement {m}: {time.time() - start:.1f} s", flush=True)
    return measurements


def report(measurements: list) -> None:
    columns = range(1, BATCH_WIDTHS.index(12) + 1)
    for name, estimate in ESTIMATORS.items():
        spreads = []
        for bi, b in enumerate(BATCHES):
            for ki, kv in enumerate(KV):
                curves = []
                for m in measurements:
                    cells = m[bi][ki]
                    curves.append([estimate(cells[j]) / estimate(cells[0]) for j in range(len(BATCH_WIDTHS))])
                spread = statistics.fmean(max(c[j] for c in curves) - min(c[j] for c in curves) for j in columns)
                spreads.append(spread)
                shown = ", ".join("/".join(f"{c[j]:.2f}" for c in curves) for j in columns)
                print(f"{name:13s} B={b:<2d} kv={kv}: spread {spread:.3f}; t(q)/t(1) for q = 2,3,4,5,6,8,12, each measurement: {shown}")
        print(f"{name:13s} mean spread {statistics.fmean(spreads):.3f}\n")


if __name__ == "__main__":
    torch.set_num_threads(2)
    model, _, _ = load_bench_model(None, "cpu", None)
    print(f"# {sys.argv[0]}: {timing.processor(torch.device('cpu'))}, torch {torch.__version__}, 2 threads", flush=True)
    report(measure_all(model))
