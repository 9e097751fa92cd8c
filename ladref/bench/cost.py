"""``python -m ladref bench --cost``: measure the step-cost curve t(q, kv), print it and plot it.

    python -m ladref bench --cost --threads 2 --kv-lengths 128,512,1024 --figure docs/img/cost_curve_cpu.png

The measuring and the model live in the core (`ladref.fast.cost`); this module parses, prints and draws.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..fast.cost import DEFAULT_KV_LENGTHS, CostModel, default_widths


def _ints(text: str) -> tuple[int, ...]:
    """"1,2,4" -> (1, 2, 4) (argparse type)."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,4, got {text!r}") from err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``bench --cost``."""
    add = parser.add_argument
    add("--widths", type=_ints, default=None, metavar="Q,Q,...",
        help="--cost: step widths q to time, from 1 (default 1,2,3,4,6,8,12,16,24,32,48,64 on CPU, up to 256 on GPU)")
    add("--kv-lengths", type=_ints, default=DEFAULT_KV_LENGTHS, metavar="KV,KV,...",
        help="--cost: KV-cache lengths to time at (default 128,512,1024)")
    add("--repeats", type=int, default=5, help="--cost: timed passes per (q, kv), the median kept (default 5)")


def cost_lines(cost: CostModel) -> list[str]:
    """One markdown table per KV length: q, t(q) ms, t(q)/t(1), q / t(q) tokens per second."""
    lines = []
    for kv in cost.kv_lengths:
        times = cost.times(kv)
        lines += [f"KV length {kv}: greedy {1 / times[1]:.1f} tokens/s", "",
                  "| q | t(q) ms | t(q)/t(1) | q/t(q) tok/s |", "|---|---|---|---|"]
        lines += [f"| {q} | {1e3 * t:.1f} | {t / times[1]:.2f} | {q / t:.0f} |" for q, t in times.items()]
        lines.append("")
    return lines


def plot_cost(cost: CostModel, path: str | Path, title: str) -> Path:
    """Save t(q) and t(q)/t(1) against q (log2 axis), one line per KV length (matplotlib's Agg canvas)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("plot_cost needs matplotlib: pip install matplotlib") from err
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    ax_t, ax_r = fig.subplots(1, 2)
    for kv in cost.kv_lengths:
        times = cost.times(kv)
        ax_t.plot(list(times), [1e3 * t for t in times.values()], marker="o", label=f"KV length {kv}")
        ax_r.plot(list(times), [t / times[1] for t in times.values()], marker="o", label=f"KV length {kv}")
    ax_r.plot(cost.widths, cost.widths, ls="--", color="gray", label="q (every fed token accepted)")
    ax_r.set_yscale("log", base=2)
    for ax, label in ((ax_t, "t(q), ms per step"), (ax_r, "t(q) / t(1): tokens a step must yield")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cost.widths, [str(q) for q in cost.widths], fontsize=8)
        ax.yaxis.set_major_formatter("{x:g}")
        ax.set_xlabel("tokens fed per step q, log2 scale")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def run_cost(model, args: argparse.Namespace, meta: dict) -> int:
    """Measure the model's cost curve with progress on stderr, print the tables, save JSON and figure."""
    from tqdm import tqdm

    widths = args.widths or default_widths(model.device)
    bar = tqdm(desc="cost t(q, kv)", unit="pass", file=sys.stderr, disable=args.no_progress)

    def show(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    cost = CostModel.measure(model, widths, args.kv_lengths, args.repeats, attention_backend=args.attention_backend,
                             progress=show)
    bar.close()
    print(f"\nstep cost t(q, kv), median of {args.repeats} passes: {cost.label}\n")
    print("\n".join(cost_lines(cost)))
    device = model.device.type
    meta = {key: value for key, value in meta.items() if key != "autotune"}
    out = cost.save(Path(args.out) / f"cost_{device}.json", meta=dict(meta, repeats=args.repeats))
    figure = plot_cost(cost, args.figure or Path(args.out) / f"cost_{device}.png",
                       f"Step cost of SmolLM2-135M-Instruct ({meta['dtype']}), {device.upper()}: {meta['machine']}")
    print(f"saved {out} and {figure}")
    return 0
