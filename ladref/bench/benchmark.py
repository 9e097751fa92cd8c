"""``python -m ladref bench``: ladref's and transformers' decoders on real prompts.

Examples::

    python -m ladref bench --dataset math --limit 5 --method lookahead,plookup
    python -m ladref bench --dataset humaneval,mtbench,math --method generate,plookup,jacobi,lookahead \\
        --config 15/5/15 --config 7/5/7 --autotune --max-new-tokens 256 --dtype float16 --out benchmarks/results_gpu
    python -m ladref bench --dataset math --limit 30 --agreement --dtype bfloat16   # outputs vs generate / greedy
    python -m ladref bench --dataset math --limit 3 --scaling                      # the scaling-law sweep and figure
    python -m ladref bench --cost --threads 2                                      # the step-cost curve t(q, kv)

The library functions live in `ladref.bench.measure` (measuring), `ladref.bench.report`
(tables, files), `ladref.bench.agreement`, `ladref.bench.autotune`, `ladref.bench.scaling` and `ladref.bench.cost`;
this module only parses, prints and saves.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch
import transformers

from ..config import LookaheadConfig
from ..kernels import ATTENTION_BACKENDS
from .cost import add_arguments as add_cost_arguments
from .cost import run_cost
from .datasets import DATASETS, encode_prompts, load_prompts
from .measure import BenchSettings, run_bench
from .methods import METHODS, config_label
from .report import agreement_lines, markdown_table, save_results, summarize

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _names(values: list[str] | None, allowed: tuple[str, ...], default: list[str]) -> list[str]:
    names = [n.strip() for v in (values or default) for n in v.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise SystemExit(f"error: unknown name(s) {bad}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def parse_config(text: str) -> LookaheadConfig:
    """"W/N/G" -> LookaheadConfig(W, N, G) (argparse type)."""
    try:
        w, n, g = (int(part) for part in text.split("/"))
        return LookaheadConfig(w, n, g)
    except (TypeError, ValueError) as err:
        raise argparse.ArgumentTypeError(f"expected W/N/G such as 15/5/15, got {text!r} ({err})") from err


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the bench options."""
    add = parser.add_argument
    add("--dataset", action="append", help=f"one of {', '.join(DATASETS)} (repeat or comma-separate); default math")
    add("--limit", type=int, default=5, help="prompts per dataset (default 5)")
    add("--method", action="append", help=f"decoders besides ladref greedy, from {', '.join(METHODS)} "
        "(repeat or comma-separate); default lookahead")
    add("--config", action="append", type=parse_config, metavar="W/N/G", help="a lookahead config (repeat for several rows)")
    add("--window", "-W", type=int, default=4, help="lookahead window size W when no --config (default 4)")
    add("--ngram", "-N", type=int, default=4, help="lookahead n-gram size N when no --config (default 4)")
    add("--candidates", "-G", type=int, default=None, help="lookahead max candidates G when no --config (default W)")
    add("--block-size", type=int, default=None, help="Jacobi block size m (default W)")
    add("--lookup-tokens", type=int, default=10, help="prompt lookup: prompt_lookup_num_tokens (default 10)")
    add("--max-new-tokens", type=int, default=96, help="tokens per prompt (default 96)")
    add("--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default float16 on CUDA, float32 on CPU)")
    add("--attention-backend", choices=ATTENTION_BACKENDS, default="auto", help="SDPA kernels of ladref's decoders")
    add("--compile-mode", choices=("reduce-overhead", "default", "none"), default="reduce-overhead",
        help="torch.compile mode of the compiled_* methods (none: constant shapes, not compiled)")
    add("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    add("--device", default=None, help="default: cuda when available, else cpu")
    add("--out", default="benchmarks/results", help="folder for the JSON / CSV files (default benchmarks/results)")
    add("--no-progress", action="store_true", help="hide the progress bars")
    add("--autotune", action="store_true", help="add the auto-tuned (W, N, G), tuned on prompts outside the benchmarked ones")
    add("--agreement", action="store_true", help="compare outputs (greedy vs generate, jacobi / lookahead vs greedy) instead")
    add("--scaling", action="store_true", help="run the scaling-law sweep (W in 1..16, N in 3,5,7, G=W) instead")
    add("--cost", action="store_true", help="measure, print and plot the step-cost curve t(q, kv) instead (ladref.cost)")
    add_cost_arguments(parser)
    add("--figure", default=None, help="where --scaling / --cost save their figure "
        "(default docs/img/scaling_law.png / <out>/cost_<device>.png)")


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


def _autotune(model, tokenizer, datasets: list[str], args) -> tuple[LookaheadConfig | None, dict]:
    """Tune on prompt number limit+1 of each dataset (never one that is benchmarked)."""
    from .autotune import recommend

    ids = [encode_prompts(tokenizer, load_prompts(d, args.limit + 1)[-1:])[0] for d in datasets]
    rec = recommend(model, ids, max_new_tokens=min(args.max_new_tokens, 128), attention_backend=args.attention_backend,
                    progress=None if args.no_progress else (lambda msg: print("  autotune:", msg, file=sys.stderr, flush=True)))
    for r in rec.rows:
        print(f"  autotune {config_label(r.config)}: S={r.compression:.2f} q={r.mean_forward_tokens:.1f} "
              f"predicted {r.predicted_speedup:.2f}x measured {r.measured_speedup:.2f}x match={r.match}")
    print("autotune:", rec.reason)
    return rec.config, {"reason": rec.reason, "forward_cost_s": rec.forward_cost, "config": asdict(rec.config) if rec.config else None,
                        "candidates": [dict(asdict(r), config=asdict(r.config)) for r in rec.rows]}


def _scaling(model, ids, args, dataset: str) -> None:
    from .scaling import fit_log_linear, plot_scaling, scaling_sweep

    def show(p):
        print(f"  W={p.window:2d} N={p.ngram} G={p.candidates:2d}: step tokens {p.step_tokens:4d} "
              f"steps {p.steps:4d} S={p.compression:.2f}", flush=True)

    points = scaling_sweep(model, ids, max_new_tokens=args.max_new_tokens, on_point=show)
    for fit in fit_log_linear(points).values():
        print(f"N={fit.ngram}: S = {fit.intercept:.2f} + {fit.slope:.3f} * log2(step tokens), r2={fit.r2:.2f}")
    path = plot_scaling(points, args.figure or "docs/img/scaling_law.png", f"Lookahead scaling law, SmolLM2-135M, {dataset} ({len(ids)} prompts)")
    out = Path(args.out) / f"scaling_{dataset}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "python -m ladref " + " ".join(sys.argv[1:]), "points": [asdict(p) for p in points]}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"saved {path} and {out}")


def _agreement(model, datasets: list[str], tokenizer, settings: BenchSettings, args, meta: dict) -> None:
    from tqdm import tqdm

    from .agreement import NEAR_TIE, measure_agreement

    records = []
    for dataset in datasets:
        prompts = load_prompts(dataset, args.limit)
        bar = tqdm(total=len(prompts), desc=f"agreement {dataset}", file=sys.stderr, disable=args.no_progress)
        records += measure_agreement(model, encode_prompts(tokenizer, prompts), max_new_tokens=settings.max_new_tokens,
                                     configs=settings.configs, block_size=settings.block_size, eos=sorted(_eos(model)),
                                     prompt_ids=[p.prompt_id for p in prompts], attention_backend=settings.attention_backend,
                                     on_prompt=lambda _: bar.update())
        bar.close()
    rows = [asdict(r) for r in records]
    payload = {"meta": dict(meta, near_tie=NEAR_TIE.get(model.dtype)), "records": rows}
    print("\n" + "\n".join(agreement_lines(payload)))
    stem = Path(args.out) / f"agreement_{str(model.dtype).removeprefix('torch.')}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    with stem.with_suffix(".csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"saved {stem}.json and {stem}.csv")


def _eos(model) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set() if eos is None else {eos} if isinstance(eos, int) else set(eos)


def _bench(model, tokenizer, dataset: str, settings: BenchSettings, args, meta: dict) -> None:
    from tqdm import tqdm

    prompts = load_prompts(dataset, args.limit)
    ids = encode_prompts(tokenizer, prompts)
    if args.scaling:
        return _scaling(model, ids, args, dataset)
    bar = tqdm(total=len(ids), desc=dataset, file=sys.stderr, disable=args.no_progress)
    setup: dict[str, float] = {}
    records = run_bench(model, ids, settings, prompt_ids=[p.prompt_id for p in prompts], on_prompt=lambda _: bar.update(),
                        setup_s=setup)
    bar.close()
    summaries = summarize(records)
    print(f"\n{dataset}: jacobi m={settings.block_size}, plookup k={settings.lookup_tokens}, "
          f"max_new_tokens={settings.max_new_tokens}, attention_backend={settings.attention_backend}")
    print(markdown_table(summaries, dataset))
    print("one-time set-up, s (first call; compilation and capture for compiled rows, not in the table): "
          + ", ".join(f"{label} {seconds:.1f}" for label, seconds in setup.items()))
    for r in records:
        if not r.match:
            print(f"WARNING: {r.method} output differs from greedy on prompt {r.prompt_id}")
    paths = save_results(Path(args.out) / dataset, records, summaries, dict(meta, dataset=dataset, setup_s=setup))
    print(f"saved {paths[0]} and {paths[1]}")


def run(args: argparse.Namespace) -> int:
    """Load SmolLM2, run the benchmark (or agreement / scaling) on each dataset, print and save."""
    from ..models import load_default_model

    if args.threads:
        torch.set_num_threads(args.threads)
    datasets = _names(args.dataset, DATASETS, ["math"])
    methods = _names(args.method, METHODS, ["lookahead"])
    W = args.window
    configs = tuple(args.config or [LookaheadConfig(W, args.ngram, W if args.candidates is None else args.candidates)])
    settings = BenchSettings(tuple(methods), configs, args.block_size or configs[0].window_size, args.lookup_tokens,
                             args.max_new_tokens, attention_backend=args.attention_backend,
                             compile_mode=None if args.compile_mode == "none" else args.compile_mode)
    model, tokenizer = load_default_model(args.device, DTYPES.get(args.dtype))
    device = model.device
    print(f"model SmolLM2-135M-Instruct on {device} ({_machine(device)}, {model.dtype}); torch {torch.__version__}, "
          f"transformers {transformers.__version__}")
    meta = {"command": "python -m ladref " + " ".join(sys.argv[1:]), "device": str(device), "machine": _machine(device),
            "dtype": str(model.dtype).removeprefix("torch."), "torch": torch.__version__,
            "transformers": transformers.__version__, "autotune": None}
    if args.cost:
        return run_cost(model, args, meta)
    if args.agreement:
        _agreement(model, datasets, tokenizer, settings, args, meta)
        return 0
    if args.autotune and not args.scaling:
        tuned, meta["autotune"] = _autotune(model, tokenizer, datasets, args)
        if tuned is not None:
            settings = replace(settings, methods=tuple(dict.fromkeys(settings.methods + ("lookahead",))),
                               configs=settings.configs + (tuned,))
    meta["settings"] = {"methods": settings.methods, "configs": [config_label(c) for c in settings.configs],
                        "block_size": settings.block_size, "lookup_tokens": settings.lookup_tokens,
                        "max_new_tokens": settings.max_new_tokens, "attention_backend": settings.attention_backend,
                        "compile_mode": settings.compile_mode}
    for dataset in datasets:
        _bench(model, tokenizer, dataset, settings, args, meta)
    return 0
