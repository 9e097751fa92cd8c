"""``bench --dataset specbench --batch 1,2,4,8,16``: run `ladref.bench.load`, print, save and plot it.

    python -m ladref bench --dataset specbench --limit 6 --batch 1,2,4,8,16 --max-new-tokens 64 --lookup-tokens 4 \\
        --threads 2 --out benchmarks/results --figure docs/img/load_cpu.png

The surface the ``adaptive`` and ``chain`` rows price their steps with is measured first (the
engines' start-up profile; `ladref.pricing.surface.CostSurface.measure`) and saved beside the results.
The figure sets the measured speedups over batched greedy beside those that the same S and step
widths would give on a GPU-shaped roofline surface: a model, labelled as one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..config import LookaheadConfig
from ..pricing.surface import BATCH_WIDTHS, CostSurface
from .datasets import encode_prompts, load_prompts
from .figures import log2_axis, panels, save
from .load import LoadRow, LoadSettings, load_dicts, predict, run_load
from .protocol import Protocol

GPU_SHAPED = CostSurface.roofline(0.010, 0.010 / 512, widths=BATCH_WIDTHS, batches=(1, 2, 4, 8, 16, 32, 64),
                                  label="GPU-shaped model: flat up to 512 tokens a pass, then linear (assumed, not measured)")
"""t(q, B) = max(10 ms, B q x 10 ms / 512): a launch-bound step flat to 512 tokens (an H200's eager float16
surface measured flat for q <= 32, B <= 16: benchmarks/results_gpu/cost_batch); an assumption for the
prediction, not a measurement."""


def _where(device: str) -> str:
    """A device type as the tables and figures name it: "GPU" for cuda, else its name in capitals."""
    return "GPU" if device == "cuda" else device.upper()


def load_markdown(rows: Sequence[LoadRow], cpu: Mapping[str, Mapping[int, float]], gpu: Mapping[str, Mapping[int, float]],
                  device: str = "cpu") -> str:
    """The results as a markdown table: throughput, speedup (measured; predicted by the `device`'s measured
    surface and by the GPU-shaped model)."""
    lines = [f"| B | method | tokens/s | x batched greedy, pooled | per batch [95% CI] | predicted, {_where(device)} surface | GPU-shaped model | latency s | S | "
             "fed/step | rows = batched greedy | rows apart from batch 1 | rounds | flagged |",
             "|---" * 14 + "|"]
    for r in rows:
        cpu_x, gpu_x = cpu.get(r.method, {}).get(r.batch), gpu.get(r.method, {}).get(r.batch)
        ci = "" if r.vs_greedy is None else f"{r.vs_greedy['geomean']:.2f}x [{r.vs_greedy['low']:.2f}, {r.vs_greedy['high']:.2f}]"
        lines.append(f"| {r.batch} | {r.method} | {r.tokens_per_s:.1f} | {r.speedup:.2f} | {ci} | "
                     f"{'' if cpu_x is None else f'{cpu_x:.2f}'} | {'' if gpu_x is None else f'{gpu_x:.2f}'} | {r.latency_s:.2f} | "
                     f"{r.compression:.2f} | {r.fed_per_step:.1f} | {r.rows_equal_batched_greedy}/{r.rows} | "
                     f"{len(r.rows_apart_from_batch_1) if r.method in ('greedy', 'generate') else ''} | {r.rounds} | {r.flagged} |")
    return "\n".join(lines)


def plot_load(rows: Sequence[LoadRow], gpu: Mapping[str, Mapping[int, float]], path: str | Path, title: str,
              device: str = "cpu") -> Path:
    """Speedup over batched greedy against B, one line per method: measured (left), the GPU-shaped model (right)."""
    fig, ax_m, ax_g = panels(size=(11, 4.4), sharey=True)
    batches = sorted({r.batch for r in rows})
    for method in dict.fromkeys(r.method for r in rows):
        mine = sorted((r for r in rows if r.method == method), key=lambda r: r.batch)  # a run may take the sizes in any order
        line, = ax_m.plot([r.batch for r in mine], [r.speedup for r in mine], marker="o", label=method)
        if method in gpu:
            model = sorted(gpu[method].items())
            ax_g.plot([b for b, _ in model], [x for _, x in model], marker="o", ls="--", label=method, color=line.get_color())
    for ax, label in ((ax_m, f"measured, this {_where(device)}"), (ax_g, "GPU-shaped surface (a model, not a measurement)")):
        ax.axhline(1.0, color="gray", lw=1)
        log2_axis(ax, "batch size B, log2 scale", "throughput / batched greedy's" if ax is ax_m else "", batches,
                  legend_size=7 if ax is ax_m else None)
        ax.set_title(label, fontsize=10)
    return save(fig, path, title)


def run_load_command(model, tokenizer, datasets: list[str], methods: Sequence[str], args: argparse.Namespace, meta: dict) -> int:
    """Load the prompts, measure the surface (or read ``--surface``), run the benchmark, print and save it."""
    prompts = [p for d in datasets for p in load_prompts(d, args.limit, args.skip)]
    ids = [row[0] for row in encode_prompts(tokenizer, prompts)]
    config = args.config[0] if args.config else LookaheadConfig(args.window, args.ngram, args.candidates or args.window)
    methods = ("greedy",) + tuple(m for m in methods if m != "greedy")  # the baseline, first
    protocol = Protocol(min_rounds=args.rounds, max_rounds=max(args.rounds, Protocol().max_rounds))  # a batch of 12 is one sample a round
    settings = LoadSettings(tuple(args.batch), methods, args.max_new_tokens, config, args.lookup_tokens, args.threshold, protocol)
    if args.surface:
        surface = CostSurface.load(args.surface)
    else:
        print("measuring the cost surface t(q, kv, B) (the engines' start-up profile) ...", file=sys.stderr, flush=True)
        surface = CostSurface.measure(model, tuple(sorted({1, *args.batch})), BATCH_WIDTHS, (128, 512), repeats=3,
                                      attention_backend=args.attention_backend)
    out = Path(args.out)
    surface.save(out / f"load_surface_{model.device.type}.json", meta={k: v for k, v in meta.items() if k != "autotune"})
    eos = sorted({model.generation_config.eos_token_id} if isinstance(model.generation_config.eos_token_id, int)
                 else set(model.generation_config.eos_token_id or []))
    kv = sum(len(p) for p in ids) / len(ids) + args.max_new_tokens / 2
    stem = out / f"load_{model.device.type}"
    title = f"Speculation under load: SmolLM2-135M ({meta['dtype']}), {len(ids)} prompts, {meta['machine']}"

    def save_rows(rows: list[LoadRow]) -> None:  # after every batch size: a long run is kept as it goes
        cpu, gpu = predict(rows, surface, kv), predict(rows, GPU_SHAPED, kv)
        settings_meta = {"batches": list(settings.batches), "methods": list(settings.methods), "max_new_tokens": settings.max_new_tokens,
                         "lookahead": str(settings.config), "lookup_tokens": settings.lookup_tokens, "threshold": settings.threshold}
        payload = {"meta": dict(meta, datasets=datasets, prompts=[f"{p.task}:{p.prompt_id}" for p in prompts], settings=settings_meta,
                                prediction_kv=round(kv, 1), gpu_shaped=GPU_SHAPED.label),
                   "rows": load_dicts(rows), "predicted_cpu_surface": cpu, "predicted_gpu_shaped": gpu}
        stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
        table = load_markdown(rows, cpu, gpu, model.device.type)
        stem.with_suffix(".md").write_text(table + "\n")
        plot_load(rows, gpu, args.figure or stem.with_suffix(".png"), title, model.device.type)
        print("\n" + table, flush=True)

    run_load(model, ids, settings, surface, eos, on_size=save_rows,
             on_batch=None if args.no_progress else lambda b, done: print(f"  B={b}: {done}", file=sys.stderr, flush=True))
    figure = args.figure or stem.with_suffix(".png")
    print(f"saved {stem}.json, {stem}.md and {figure}")
    return 0

