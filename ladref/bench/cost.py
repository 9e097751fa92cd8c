"""``python -m ladref bench --cost``: measure the step-cost curve t(q, kv), print it and plot it.

    python -m ladref bench --cost --threads 2 --kv-lengths 128,512,1024 --figure docs/img/cost_curve_cpu.png
    python -m ladref bench --cost --batch 1,2,4,8,16 --threads 2 --kv-lengths 128,512   # the surface t(q, kv, B)

The measuring and the model live in the core (`ladref.pricing.cost`); this module parses, prints and draws,
and measures the whole curve in the rounds of the measurement protocol (`curve_rounds`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import torch

from ..pricing.cost import DEFAULT_KV_LENGTHS, CostModel, default_widths
from ..pricing.surface import BATCH_WIDTHS, CostSurface
from .figures import log2_axis, panels, save
from .protocol import Protocol, disturbed, figure, rounds, settled, timed

Curve = TypeVar("Curve", CostModel, CostSurface)


def curve_rounds(measure: Callable[[], Curve], protocol: Protocol) -> tuple[Curve, dict]:
    """Measure a whole curve in protocol rounds (`ladref.bench.protocol`): a round is one measurement,
    compared with the others by its wall time; the curve kept is the median undisturbed round's.

    Returns:
        The curve, and its record: every round's wall seconds, CPU share, load average and whether it
        was disturbed, whether it never settled (flagged), and the spread of each cell over the rounds
        (the largest time over the smallest, the worst cell).
    """
    curves: list[Curve] = []

    def one(_: str) -> object:
        curve, sample = timed(measure)
        curves.append(curve)
        return sample

    samples = rounds(["curve"], one, protocol)["curve"]
    spread = max(max(ts) / min(ts) for ts in zip(*(_cells(curve) for curve in curves)))
    record = {"rounds_s": [round(s.wall_s, 2) for s in samples], "cpu_shares": [round(s.share(protocol.threads), 3) for s in samples],
              "loads": [round(s.load, 2) for s in samples], "disturbed": disturbed(samples, protocol),
              "flagged": not settled(samples, protocol), "worst_cell_spread": round(spread, 3)}
    return curves[samples.index(figure(samples, protocol))], record


def _cells(curve: CostModel | CostSurface) -> list[float]:
    """Every time of a curve (of each batch size's curve, for a surface), in one order."""
    models = curve.models if isinstance(curve, CostSurface) else [curve]
    return [t for model in models for row in model.seconds for t in row]


def cost_protocol(threads: int | None = None) -> Protocol:
    """The protocol of a curve's rounds: this process's torch threads (`threads`: another count)."""
    return replace(Protocol(), threads=torch.get_num_threads() if threads is None else threads)


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
        help="--cost: step widths q to time, from 1 (default 1,2,3,4,6,8,12,16,24,32,48,64 on CPU, up to 256 on GPU; "
        "with --batch 1,2,3,4,6,8,12,16)")
    add("--kv-lengths", type=_ints, default=DEFAULT_KV_LENGTHS, metavar="KV,KV,...",
        help="--cost: KV-cache lengths to time at (default 128,512,1024)")
    add("--repeats", type=int, default=5, help="--cost: timed passes per (q, kv), the fastest kept (default 5)")
    add("--batch", type=_ints, default=None, metavar="B,B,...",
        help="with --cost: measure the surface t(q, kv, B) at these batch sizes (from 1); with a --dataset: the "
             "speculation-under-load benchmark at these batch sizes (ladref.bench.load)")
    add("--threshold", type=int, default=4, help="--batch: the threshold rule drafts while the batch has at most this many rows (default 4)")
    add("--surface", default=None, help="--batch: a saved cost surface (JSON) to price steps with, instead of measuring it")


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
    fig, ax_t, ax_r = panels()
    for kv in cost.kv_lengths:
        times = cost.times(kv)
        ax_t.plot(list(times), [1e3 * t for t in times.values()], marker="o", label=f"KV length {kv}")
        ax_r.plot(list(times), [t / times[1] for t in times.values()], marker="o", label=f"KV length {kv}")
    ax_r.plot(cost.widths, cost.widths, ls="--", color="gray", label="q (every fed token accepted)")
    ax_r.set_yscale("log", base=2)
    for ax, label in ((ax_t, "t(q), ms per step"), (ax_r, "t(q) / t(1): tokens a step must yield")):
        log2_axis(ax, "tokens fed per step q, log2 scale", label, cost.widths)
    return save(fig, path, title)


def run_cost(model, args: argparse.Namespace, meta: dict) -> int:
    """Measure the model's cost curve with progress on stderr, print the tables, save JSON and figure."""
    from tqdm import tqdm

    widths = args.widths or default_widths(model.device)
    bar = tqdm(desc="cost t(q, kv)", unit="pass", file=sys.stderr, disable=args.no_progress)

    def show(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    cost, record = curve_rounds(lambda: CostModel.measure(model, widths, args.kv_lengths, args.repeats,
                                                          attention_backend=args.attention_backend, progress=show), cost_protocol())
    bar.close()
    print(f"\nstep cost t(q, kv), fastest of {args.repeats} passes, the median of {len(record['rounds_s'])} measurements "
          f"({_said(record)}): {cost.label}\n")
    print("\n".join(cost_lines(cost)))
    device = model.device.type
    meta = {key: value for key, value in meta.items() if key != "autotune"}
    out = cost.save(Path(args.out) / f"cost_{device}.json", meta=dict(meta, repeats=args.repeats, protocol=record))
    figure = plot_cost(cost, args.figure or Path(args.out) / f"cost_{device}.png",
                       f"Step cost of SmolLM2-135M-Instruct ({meta['dtype']}), {device.upper()}: {meta['machine']}")
    print(f"saved {out} and {figure}")
    return 0


def surface_lines(surface: CostSurface, kv: int) -> list[str]:
    """One markdown table at KV length `kv`: per q, t(q, B) ms and B q / t(q, B) tokens fed per second, every B."""
    head = " | ".join(f"B={b} ms | B={b} tok/s" for b in surface.batches)
    lines = [f"KV length {kv}", "", f"| q | {head} |", "|---|" + "---|---|" * len(surface.batches)]
    for q in surface.widths:
        cells = " | ".join(f"{1e3 * surface.time(q, kv, b):.1f} | {b * q / surface.time(q, kv, b):.0f}" for b in surface.batches)
        lines.append(f"| {q} | {cells} |")
    return lines + [""]


def plot_surface(surface: CostSurface, kv: int, path: str | Path, title: str) -> Path:
    """Save t(q, B) / t(1, B), the tokens each row's step must yield, and the tokens fed per second, one line per B."""
    fig, ax_r, ax_t = panels()
    for b in surface.batches:
        ax_r.plot(surface.widths, [surface.relative(q, kv, b) for q in surface.widths], marker="o", label=f"B = {b}")
        ax_t.plot(surface.widths, [b * q / surface.time(q, kv, b) for q in surface.widths], marker="o", label=f"B = {b}")
    ax_r.plot(surface.widths, surface.widths, ls="--", color="gray", label="q (every fed token accepted)")
    for ax, label in ((ax_r, "t(q, B) / t(1, B): tokens a row's step must yield"), (ax_t, "tokens fed per second, B q / t(q, B)")):
        ax.set_yscale("log", base=2)
        log2_axis(ax, "tokens fed per row per step q, log2 scale", label, surface.widths)
    return save(fig, path, title)


def run_cost_surface(model, args: argparse.Namespace, meta: dict) -> int:
    """``bench --cost --batch 1,2,4``: measure the surface t(q, kv, B), print its tables, save JSON and figure."""
    from tqdm import tqdm

    bar = tqdm(desc="cost t(q, kv, B)", unit="pass", file=sys.stderr, disable=args.no_progress)
    surface, record = curve_rounds(lambda: CostSurface.measure(model, args.batch, args.widths or BATCH_WIDTHS, args.kv_lengths,
                                                               args.repeats, args.attention_backend,
                                                               progress=lambda done, total: bar.update(1)), cost_protocol())
    bar.close()
    print(f"\nstep cost t(q, kv, B), fastest of {args.repeats} batched passes, the median of {len(record['rounds_s'])} "
          f"measurements ({_said(record)}): {surface.label}\n")
    for kv in surface.kv_lengths:
        print("\n".join(surface_lines(surface, kv)))
    device = model.device.type
    meta = {key: value for key, value in meta.items() if key != "autotune"}
    out = surface.save(Path(args.out) / f"cost_surface_{device}.json", meta=dict(meta, repeats=args.repeats, protocol=record))
    figure = plot_surface(surface, surface.kv_lengths[0], args.figure or Path(args.out) / f"cost_surface_{device}.png",
                          f"Batched step cost of SmolLM2-135M-Instruct ({meta['dtype']}), {device.upper()}, "
                          f"KV length {surface.kv_lengths[0]}: {meta['machine']}")
    print(f"saved {out} and {figure}")
    return 0


def _said(record: dict) -> str:
    """A curve's rounds in words: flagged or not, and its worst cell's spread."""
    state = "FLAGGED: the rounds never agreed" if record["flagged"] else "settled"
    return f"{state}; worst cell's spread over the rounds {record['worst_cell_spread']:.2f}x"
