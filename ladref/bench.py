"""``python -m ladref bench``: greedy / jacobi / lookahead / prompt lookup on real prompts.

Examples::

    python -m ladref bench --dataset math --limit 5 --method lookahead,plookup
    python -m ladref bench --dataset humaneval,mtbench,math --method jacobi,lookahead,plookup \\
        --window 4 --ngram 4 --candidates 4 --max-new-tokens 96 --out benchmarks/results
    python -m ladref bench --dataset math --autotune          # tune (W, N, G), then benchmark it
    python -m ladref bench --dataset math --limit 3 --scaling  # the scaling-law sweep and figure

The library functions live in `ladref.bench_run` (measuring), `ladref.bench_report`
(tables, files), `ladref.autotune` and `ladref.scaling`; this module only parses and prints.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from .bench_report import markdown_table, save_results, summarize
from .bench_run import METHODS, BenchSettings, run_bench
from .config import LookaheadConfig
from .datasets import DATASETS, encode_prompts, load_prompts


def _names(values: list[str] | None, allowed: tuple[str, ...], default: list[str]) -> list[str]:
    names = [n.strip() for v in (values or default) for n in v.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise SystemExit(f"error: unknown name(s) {bad}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the bench options."""
    parser.add_argument("--dataset", action="append", help=f"one of {', '.join(DATASETS)} (repeat or comma-separate); default math")
    parser.add_argument("--limit", type=int, default=5, help="prompts per dataset (default 5)")
    parser.add_argument("--method", action="append",
                        help=f"decoders besides greedy, from {', '.join(METHODS)} (repeat or comma-separate); default lookahead")
    parser.add_argument("--window", "-W", type=int, default=4, help="lookahead window size W (default 4)")
    parser.add_argument("--ngram", "-N", type=int, default=4, help="lookahead n-gram size N (default 4)")
    parser.add_argument("--candidates", "-G", type=int, default=None, help="lookahead max candidates G (default W)")
    parser.add_argument("--block-size", type=int, default=None, help="Jacobi block size m (default W)")
    parser.add_argument("--lookup-tokens", type=int, default=10, help="prompt lookup: prompt_lookup_num_tokens (default 10)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens per prompt (default 96)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--out", default="benchmarks/results", help="folder for <dataset>.json / .csv (default benchmarks/results)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--autotune", action="store_true", help="recommend (W, N, G) on the first 3 prompts, then benchmark it")
    parser.add_argument("--scaling", action="store_true", help="run the scaling-law sweep (W in 1..16, N in 3,5,7, G=W) instead")
    parser.add_argument("--figure", default="docs/img/scaling_law.png", help="where --scaling saves its figure")


def _machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} torch threads"


def _autotune(model, ids, settings: BenchSettings) -> tuple[BenchSettings, dict]:
    from .autotune import recommend

    rec = recommend(model, ids[:3], max_new_tokens=min(settings.max_new_tokens, 64))
    print("autotune forward cost t(q), ms: " + ", ".join(f"{q}: {1e3 * t:.1f}" for q, t in rec.forward_cost.items()))
    for r in rec.rows:
        c = r.config
        print(f"  W={c.window_size} N={c.ngram_size} G={c.max_candidates}: S={r.compression:.2f} q={r.mean_forward_tokens:.1f} "
              f"predicted {r.predicted_speedup:.2f}x measured {r.measured_speedup:.2f}x match={r.match}")
    print("autotune:", rec.reason)
    info = {"reason": rec.reason, "forward_cost_s": rec.forward_cost,
            "candidates": [dict(asdict(r), config=asdict(r.config)) for r in rec.rows]}
    if rec.config is None:
        methods = tuple(m for m in settings.methods if m != "lookahead")
        return BenchSettings(methods, settings.config, settings.block_size, settings.lookup_tokens, settings.max_new_tokens), info
    methods = settings.methods if "lookahead" in settings.methods else settings.methods + ("lookahead",)
    return BenchSettings(methods, rec.config, settings.block_size, settings.lookup_tokens, settings.max_new_tokens), info


def _scaling(model, ids, args, dataset: str) -> None:
    from .scaling import fit_log_linear, plot_scaling, scaling_sweep

    def show(p):
        print(f"  W={p.window:2d} N={p.ngram} G={p.candidates:2d}: step tokens {p.step_tokens:4d} "
              f"steps {p.steps:4d} S={p.compression:.2f}", flush=True)

    points = scaling_sweep(model, ids, max_new_tokens=args.max_new_tokens, on_point=show)
    for fit in fit_log_linear(points).values():
        print(f"N={fit.ngram}: S = {fit.intercept:.2f} + {fit.slope:.3f} * log2(step tokens), r2={fit.r2:.2f}")
    path = plot_scaling(points, args.figure, f"Lookahead scaling law, SmolLM2-135M, {dataset} ({len(ids)} prompts)")
    out = Path(args.out) / f"scaling_{dataset}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "python -m ladref " + " ".join(sys.argv[1:]), "points": [asdict(p) for p in points]}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"saved {path} and {out}")


def run(args: argparse.Namespace) -> int:
    """Load SmolLM2, run the benchmark on each dataset, print the tables and save the files."""
    from tqdm import tqdm

    from .models import load_default_model

    if args.threads:
        torch.set_num_threads(args.threads)
    datasets = _names(args.dataset, DATASETS, ["math"])
    methods = _names(args.method, METHODS, ["lookahead"])
    W = args.window
    config = LookaheadConfig(W, args.ngram, W if args.candidates is None else args.candidates)
    settings = BenchSettings(tuple(methods), config, args.block_size or W, args.lookup_tokens, args.max_new_tokens)
    model, tokenizer = load_default_model(args.device)
    device = next(model.parameters()).device
    print(f"model SmolLM2-135M-Instruct on {device} ({_machine(device)}); torch {torch.__version__}")
    for dataset in datasets:
        prompts = load_prompts(dataset, args.limit)
        ids = encode_prompts(tokenizer, prompts)
        if args.scaling:
            _scaling(model, ids, args, dataset)
            continue
        run_settings, tuned = _autotune(model, ids, settings) if args.autotune else (settings, None)
        bar = tqdm(total=len(ids), desc=dataset, file=sys.stderr, disable=args.no_progress)
        records = run_bench(model, ids, run_settings, prompt_ids=[p.prompt_id for p in prompts], on_prompt=lambda _: bar.update())
        bar.close()
        summaries = summarize(records)
        c = run_settings.config
        knobs = {"lookahead": f"W={c.window_size} N={c.ngram_size} G={c.max_candidates}", "jacobi": f"jacobi m={run_settings.block_size}",
                 "plookup": f"plookup k={run_settings.lookup_tokens}"}
        shown = [knobs[m] for m in run_settings.methods if m in knobs]
        print(f"\n{dataset}: {', '.join(shown + [f'max_new_tokens={run_settings.max_new_tokens}'])}")
        print(markdown_table(summaries, dataset))
        for r in records:
            if not r.match:
                print(f"WARNING: {r.method} output differs from greedy on prompt {r.prompt_id}")
        meta = {"command": "python -m ladref " + " ".join(sys.argv[1:]), "dataset": dataset, "device": str(device),
                "machine": _machine(device), "torch": torch.__version__, "settings": {
                    "methods": run_settings.methods, "window": c.window_size, "ngram": c.ngram_size, "candidates": c.max_candidates,
                    "block_size": run_settings.block_size, "lookup_tokens": run_settings.lookup_tokens,
                    "max_new_tokens": run_settings.max_new_tokens}, "autotune": tuned}
        paths = save_results(Path(args.out) / dataset, records, summaries, meta)
        print(f"saved {paths[0]} and {paths[1]}")
    return 0
