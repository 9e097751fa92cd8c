"""``python -m ladref bench``: ladref's and transformers' decoders on real prompts.

Examples::

    python -m ladref bench --dataset gsm8k --limit 5 --method lookahead,hf_plookup
    python -m ladref bench --dataset specbench --limit 10 --method hf_plookup,lookahead --config 15/5/15  # leaderboard
    python -m ladref bench --dataset humaneval,mtbench,gsm8k --method generate,hf_plookup,jacobi,lookahead \\
        --config 15/5/15 --config 7/5/7 --autotune --max-new-tokens 256 --dtype float16 --out benchmarks/results_gpu
    python -m ladref bench --dataset gsm8k --limit 30 --agreement --dtype bfloat16  # outputs vs generate / greedy
    python -m ladref bench --dataset gsm8k --limit 3 --scaling                     # the scaling-law sweep and figure
    python -m ladref bench --context-length --limit 30 --config 15/5/15 --config 4/4/4  # S and speed vs prompt length
    python -m ladref bench --cost --threads 2                                       # the step-cost curve t(q, kv)
    python -m ladref bench --cost --batch 1,2,4,8,16 --threads 2                    # ... and the surface t(q, kv, B)
    python -m ladref bench --dataset specbench --limit 6 --batch 1,2,4,8,16 --lookup-tokens 4  # speculation under load
    python -m ladref bench --multi-request mtbench --limit 15 --max-new-tokens 96  # requests in order, memories kept
    python -m ladref bench --host-overhead --batch 1,4,16                          # host work per pass, tiny model

Results go to a fresh folder, ``runs/bench-<date>-<time>/``, unless ``--out`` names one.
The library functions live in `ladref.bench.measure` (measuring), `ladref.bench.report`
(tables, files), `ladref.bench.leaderboard` (Spec-Bench's layout), `ladref.bench.agreement`,
`ladref.bench.autotune`, `ladref.bench.scaling`, `ladref.bench.context`, `ladref.bench.cost` and
`ladref.bench.load` (with `ladref.bench.engines` and `ladref.bench.load_report`), `ladref.bench.multi` and
`ladref.bench.host`;
this module only parses, prints and saves.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..kernels import ATTENTION_BACKENDS
from .cost import add_arguments as add_cost_arguments
from .cost import run_cost, run_cost_surface
from .datasets import canonical_dataset, dataset_names, encode_prompts, load_prompts
from .host import add_arguments as add_host_arguments
from .leaderboard import REFERENCE_SOURCE, leaderboard, leaderboard_dicts, leaderboard_markdown, save_leaderboard_csv
from .load import LOAD_METHODS, canonical_load_method
from .measure import BenchSettings, run_bench
from .methods import HF_LOOKUP_NGRAM, METHOD_ALIASES, METHODS, canonical_method, config_label
from .multi import MULTI_METHODS, canonical_multi_method
from .multi_report import run_multi_command
from .multi_report import add_arguments as add_multi_arguments
from .report import agreement_lines, markdown_tables, save_results, summarize
from .runinfo import default_out, run_meta

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _names(values: list[str] | None, canonical: Callable[[str], str], default: list[str]) -> list[str]:
    """Comma-separated / repeated names, each through `canonical` (aliases resolved), in order, once each."""
    try:
        names = [canonical(n.strip()) for v in (values or default) for n in v.split(",") if n.strip()]
    except ValueError as err:
        raise SystemExit(f"error: {err}") from err
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
    aliases = ", ".join(f"{a} = {m}" for a, m in METHOD_ALIASES.items())
    add("--dataset", action="append", help=f"from {', '.join(dataset_names())} (math = gsm8k; repeat or "
        "comma-separate); default gsm8k (specbench with --context-length)")
    add("--limit", type=int, default=5, help="prompts per dataset, per task for specbench; with --context-length "
        "the number of prompts, spread over prompt lengths (default 5)")
    add("--skip", type=int, default=0, help="prompts of each dataset (each task for specbench) passed over before "
        "--limit counts (default 0): e.g. --skip 10 --limit 2 takes items 10-11")
    add("--method", action="append", help=f"decoders besides ladref greedy, from {', '.join(METHODS)} "
        f"({aliases}; repeat or comma-separate); default lookahead")
    add("--config", action="append", type=parse_config, metavar="W/N/G", help="a lookahead config (repeat for several rows)")
    add("--window", "-W", type=int, default=4, help="lookahead window size W when no --config (default 4)")
    add("--ngram", "-N", type=int, default=4, help="lookahead n-gram size N when no --config (default 4)")
    add("--candidates", "-G", type=int, default=None, help="lookahead max candidates G when no --config (default W)")
    add("--block-size", type=int, default=None, help="Jacobi block size m (default W)")
    add("--lookup-tokens", type=int, default=10, help="prompt lookup: prompt_lookup_num_tokens (default 10)")
    add("--max-new-tokens", type=int, default=None, help="tokens per prompt (default 96; 48 with --host-overhead)")
    add("--dtype", choices=sorted(DTYPES), default=None, help="model dtype (default float16 on CUDA, float32 on CPU)")
    add("--attention-backend", choices=ATTENTION_BACKENDS, default="auto", help="SDPA kernels of ladref's decoders")
    add("--compile-mode", choices=("auto", "reduce-overhead", "max-autotune", "default", "none"), default="auto",
        help="compile mode of the compiled_* methods (auto: reduce-overhead on CUDA, max-autotune on a CPU; "
             "none: constant shapes, not compiled)")
    add("--compile-dir", default=None, help="keep the compiled_* methods' steps as AOTInductor packages in this folder: "
        "built by the first run, loaded by later ones (max-autotune or default mode)")
    add("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    add("--device", default=None, help="default: cuda when available, else cpu")
    add("--model", default=None, metavar="PATH", help="a local transformers causal LM folder (save_pretrained: config, "
        "weights, tokenizer); default: the embedded SmolLM2-135M-Instruct")
    add("--out", default=None, help="folder for the JSON / CSV files (default: a fresh runs/bench-<date>-<time>/)")
    add("--no-progress", action="store_true", help="hide the progress bars")
    add("--autotune", action="store_true", help="add the auto-tuned (W, N, G), tuned on prompts outside the benchmarked ones")
    add("--agreement", action="store_true", help="compare outputs (greedy vs generate, jacobi / lookahead vs greedy) instead")
    add("--scaling", action="store_true", help="run the scaling-law sweep (W in 1..16, N in 3,5,7, G=W) instead")
    add("--cost", action="store_true", help="measure, print and plot the step-cost curve t(q, kv) instead (ladref.pricing.cost)")
    add_cost_arguments(parser)
    add_multi_arguments(parser)
    add_host_arguments(parser)
    add("--context-length", action="store_true", help="S, speedup and time per step of lookahead decoding "
        "(each --config) against prompt length instead (ladref.bench.context)")
    add("--figure", default=None, help="where --scaling / --context-length / --cost save their figure (default: in --out)")


def _autotune(model, tokenizer, datasets: list[str], args) -> tuple[LookaheadConfig | None, dict]:
    """Tune on prompt number limit+1 of each dataset (of each task for specbench; never one that is benchmarked)."""
    from .autotune import recommend

    held_out = [p for d in datasets for p in load_prompts(d, args.limit + 1, args.skip)
                if p not in load_prompts(d, args.limit, args.skip)]
    ids = encode_prompts(tokenizer, held_out)
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
    figure = args.figure or Path(args.out) / f"scaling_{_stem(dataset)}.png"
    path = plot_scaling(points, figure, f"Lookahead scaling law, SmolLM2-135M, {dataset} ({len(ids)} prompts)")
    out = Path(args.out) / f"scaling_{_stem(dataset)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "python -m ladref " + " ".join(sys.argv[1:]), "points": [asdict(p) for p in points]}
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"saved {path} and {out}")


def _agreement(model, datasets: list[str], tokenizer, settings: BenchSettings, args, meta: dict) -> None:
    from tqdm import tqdm

    from .agreement import NEAR_TIE, measure_agreement

    records = []
    for dataset in datasets:
        prompts = load_prompts(dataset, args.limit, args.skip)
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


def _stem(dataset: str) -> str:
    """A file name for a dataset ("specbench:rag" -> "specbench_rag")."""
    return dataset.replace(":", "_")


def _bench(model, tokenizer, dataset: str, settings: BenchSettings, args, meta: dict) -> None:
    from tqdm import tqdm

    prompts = load_prompts(dataset, args.limit, args.skip)
    ids = encode_prompts(tokenizer, prompts)
    if args.scaling:
        return _scaling(model, ids, args, dataset)
    bar = tqdm(total=len(ids), desc=dataset, file=sys.stderr, disable=args.no_progress)
    setup: dict[str, float] = {}
    records = run_bench(model, ids, settings, prompt_ids=[p.prompt_id for p in prompts], tasks=[p.task for p in prompts],
                        on_prompt=lambda _: bar.update(), setup_s=setup)
    bar.close()
    summaries, board = summarize(records), leaderboard(records)
    print(f"\n{dataset}: {len(prompts)} prompts, jacobi m={settings.block_size}, hf_plookup k={settings.lookup_tokens}, "
          f"max_new_tokens={settings.max_new_tokens}, attention_backend={settings.attention_backend}")
    if len(board[0].tasks) > 1:
        print(leaderboard_markdown(board) + "\n")
    print(markdown_tables(summaries))
    print("one-time set-up, s (first call; compilation and capture for compiled rows, not in the tables): "
          + ", ".join(f"{label} {seconds:.1f}" for label, seconds in setup.items()))
    flagged = [f"{r.method} on {r.prompt_id}" for r in records if r.flagged]
    print(f"measurement protocol: {sum(len(r.rounds_s) for r in records)} timed calls for {len(records)} (prompt, method) "
          f"figures; {len(flagged)} flagged (never settled: a disturbed machine){': ' + ', '.join(flagged) if flagged else ''}")
    for r in records:
        if not r.match:
            print(f"WARNING: {r.method} output differs from greedy on prompt {r.prompt_id}")
    stem = Path(args.out) / _stem(dataset)
    extra = {"leaderboard": leaderboard_dicts(board), "leaderboard_reference": REFERENCE_SOURCE}
    paths = save_results(stem, records, summaries, dict(meta, dataset=dataset, setup_s=setup), extra)
    board_csv = save_leaderboard_csv(board, stem.with_name(stem.name + "_leaderboard.csv"))
    print(f"saved {paths[0]}, {paths[1]} and {board_csv}")


def _context_length(model, tokenizer, datasets: list[str], settings: BenchSettings, args, meta: dict) -> None:
    from .context import context_title, plot_context, run_context_study, save_context

    prompts = [p for d in datasets for p in load_prompts(d)]
    points = run_context_study(model, tokenizer, prompts, settings, count=args.limit,
                               progress=not args.no_progress)
    figure = Path(args.figure) if args.figure else Path(args.out) / "context_length.png"
    json_path = save_context(Path(args.out) / "context_length.json", points, dict(meta, datasets=datasets))
    plot_context(points, figure, context_title(meta, points))
    print(f"saved {json_path} and {figure}")


def run(args: argparse.Namespace) -> int:
    """Load SmolLM2, run the benchmark (or agreement / scaling / context length) on each dataset, print and save."""
    from .local_model import load_bench_model

    if args.host_overhead:  # its own tiny model, its own threads
        from .host import run_host_command

        if args.model is not None:
            raise SystemExit("error: --host-overhead uses its own tiny model; drop --model")
        return run_host_command(args)
    args.max_new_tokens = args.max_new_tokens or 96
    if args.threads:
        torch.set_num_threads(args.threads)
    datasets = _names(args.dataset, canonical_dataset, ["specbench" if args.context_length else "gsm8k"])
    under_load = bool(args.batch) and not args.cost
    if args.multi_request:
        methods = _names(args.method, canonical_multi_method, list(MULTI_METHODS[1:]))
    else:
        methods = _names(args.method, canonical_load_method, list(LOAD_METHODS)) if under_load else \
            _names(args.method, canonical_method, ["lookahead"])
    args.out = str(args.out or default_out())
    W = args.window
    configs = tuple(args.config or [LookaheadConfig(W, args.ngram, W if args.candidates is None else args.candidates)])
    only_greedy = under_load or bool(args.multi_request)  # their rows are their own (ladref.bench.load, ladref.bench.multi)
    settings = BenchSettings(("greedy",) if only_greedy else tuple(methods), configs, args.block_size or configs[0].window_size,
                             args.lookup_tokens, args.max_new_tokens, attention_backend=args.attention_backend,
                             compile_mode=None if args.compile_mode == "none" else args.compile_mode,
                             compile_dir=args.compile_dir)
    try:
        model, tokenizer, name = load_bench_model(args.model, args.device, DTYPES.get(args.dtype))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from err
    meta = dict(run_meta(model), autotune=None)
    meta["model"] = name
    print(f"model {name} on {meta['device']} ({meta['machine']}, {meta['dtype']}); torch {meta['torch']}, "
          f"transformers {meta['transformers']}; results to {args.out}")
    if args.multi_request:
        return run_multi_command(model, tokenizer, methods, args, meta)
    if args.cost:
        return (run_cost_surface if args.batch else run_cost)(model, args, meta)
    if under_load:
        from .load_report import run_load_command

        return run_load_command(model, tokenizer, datasets, methods, args, meta)
    if args.agreement:
        _agreement(model, datasets, tokenizer, settings, args, meta)
        return 0
    if args.context_length:
        _context_length(model, tokenizer, datasets, settings, args, meta)
        return 0
    if args.autotune and not args.scaling:
        tuned, meta["autotune"] = _autotune(model, tokenizer, datasets, args)
        if tuned is not None:
            settings = replace(settings, methods=tuple(dict.fromkeys(settings.methods + ("lookahead",))),
                               configs=settings.configs + (tuned,))
    meta["settings"] = {"methods": settings.methods, "configs": [config_label(c) for c in settings.configs],
                        "block_size": settings.block_size, "lookup_tokens": settings.lookup_tokens,
                        "hf_lookup_ngram": HF_LOOKUP_NGRAM, "max_new_tokens": settings.max_new_tokens,
                        "attention_backend": settings.attention_backend,
                        "compile_mode": settings.compile_mode, "compile_dir": settings.compile_dir}
    for dataset in datasets:
        _bench(model, tokenizer, dataset, settings, args, meta)
    return 0
