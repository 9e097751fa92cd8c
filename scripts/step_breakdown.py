"""Where a decoding step's time goes, against this machine's roofline (float32 SmolLM2-135M, CPU).

An eager step (`ladref.runner.ModelRunner.forward`, as decoding calls it) is timed with a clock on
each module of the model: the attention and MLP projections, the rest of attention (rotary
embedding, the cache update, scaled-dot-product attention over the cache), the rest of the MLP
(its activation), the norms, the output head, and what lies outside them (the residual adds, the
embedding, the runner's own host work: masks, positions, picking logits). Each part is set beside
the least time this machine's memory and arithmetic allow it: max(bytes read / bandwidth, FLOPs /
GEMM rate), both measured in the same run (`machine_roofline`). The whole step of a compiled package (``--compile-dir``: a `StaticRunner` loading the
packages an earlier process built) is timed beside it; `scripts/compiled_breakdown.py` clocks its parts.

    python scripts/step_breakdown.py --compile-dir DIR --max-length 1404 --out benchmarks/archive/step_breakdown

Every timing: medians over interleaved repeats, at 512 cached tokens, steps of 1 and 8 tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch

from ladref import load_default_model
from ladref.fast.static import StaticRunner
from ladref.pricing.timing import measure_steps
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

KV, WIDTHS = 512, (1, 8)


def machine_roofline(repeats: int = 7) -> tuple[float, float]:
    """(bytes/s read, fp32 GEMM FLOP/s) measured now, with torch's threads: the sum of a 512 MiB
    tensor (about the model's weights) and a 2048 x 2048 x 2048 matrix product, medians."""
    def median_s(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    big, a = torch.rand(2**27), torch.rand(2048, 2048)
    return big.numel() * 4 / median_s(big.sum), 2 * 2048**3 / median_s(lambda: a @ a)


def category(name: str, module: torch.nn.Module) -> str | None:
    """The part of the step a module's own time goes to (None: not clocked on its own)."""
    kind = type(module).__name__
    if name == "lm_head":
        return "output head"
    if kind == "Linear":
        return "attention projections" if ".self_attn." in name else "MLP projections"
    return {"LlamaAttention": "attention", "LlamaMLP": "MLP", "LlamaRMSNorm": "norms"}.get(kind)


def clock_modules(model: torch.nn.Module, totals: dict[str, float]) -> list:
    """Hooks adding each clocked module's wall time to ``totals[category]``; returns the handles."""
    handles, started = [], {}
    for name, module in model.named_modules():
        part = category(name, module)
        if part is None:
            continue
        def pre(mod, args, key=id(module)):
            started[key] = time.perf_counter()
        def post(mod, args, out, key=id(module), part=part):
            totals[part] += time.perf_counter() - started[key]
        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    return handles


def eager_breakdown(model: torch.nn.Module, repeats: int) -> dict[int, dict[str, float]]:
    """Median ms per part of a step of each width at KV cached tokens, parts exclusive of one another."""
    runner = ModelRunner(model)
    runner.prefill(torch.arange(KV + 1) % runner.facts.vocab_size, DecodeStats())
    samples: dict[int, list[dict[str, float]]] = defaultdict(list)
    for r in range(repeats + 1):
        for q in WIDTHS:
            totals: dict[str, float] = defaultdict(float)
            handles = clock_modules(model, totals)
            ids, allowed = torch.arange(q), torch.ones(q, q, dtype=torch.bool).tril_()
            start = time.perf_counter()
            runner.forward(ids, allowed=allowed)
            step = time.perf_counter() - start
            for h in handles:
                h.remove()
            runner.commit(KV - 1, torch.tensor([0]))  # back to KV cached tokens
            if r:  # the first round warms up
                parts = {"attention projections": totals["attention projections"],
                         "attention core (rotary, cache, SDPA)": totals["attention"] - totals["attention projections"],
                         "MLP projections": totals["MLP projections"],
                         "MLP activation": totals["MLP"] - totals["MLP projections"],
                         "norms": totals["norms"], "output head": totals["output head"]}
                parts["everything else (residuals, embedding, host)"] = step - sum(parts.values())
                parts["whole step"] = step
                samples[q].append(parts)
    return {q: {k: 1e3 * statistics.median(s[k] for s in rows) for k in rows[0]} for q, rows in samples.items()}


def roofline(model: torch.nn.Module, q: int, bandwidth: float, gemm: float) -> dict[str, float]:
    """Least ms per part: max(weights and cache read / bandwidth, FLOPs / gemm)."""
    c = model.config
    weights = defaultdict(int)
    for name, module in model.named_modules():
        part = category(name, module)
        if part in ("attention projections", "MLP projections", "output head"):
            weights[part] += module.weight.numel()
    kv_bytes = 2 * c.num_hidden_layers * KV * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    attn_flops = 4 * c.num_hidden_layers * q * KV * c.hidden_size
    bound = {part: 1e3 * max(4 * n / bandwidth, 2 * q * n / gemm) for part, n in weights.items()}
    bound["attention core (rotary, cache, SDPA)"] = 1e3 * max(kv_bytes / bandwidth, attn_flops / gemm)
    bound["whole step"] = sum(bound.values())
    return bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-dir", default=None, help="packages built by an earlier process: time their whole step too")
    parser.add_argument("--max-length", type=int, default=1404, help="the compiled runner's cache length (its package's)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=None, help="folder for step_breakdown.json and .md")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, _ = load_default_model("cpu")
    bandwidth, gemm = machine_roofline()
    print(f"this machine now: memory reads {bandwidth / 1e9:.1f} GB/s, fp32 GEMM {gemm / 1e9:.0f} GFLOP/s")
    parts = eager_breakdown(model, args.repeats)
    bounds = {q: roofline(model, q, bandwidth, gemm) for q in WIDTHS}
    plain = dict(zip(WIDTHS, (1e3 * s for s in measure_steps(model, ModelRunner(model), WIDTHS, [KV], args.repeats)[0])))
    compiled = {}
    if args.compile_dir:
        runner = StaticRunner(model, args.max_length, compile_mode="max-autotune", compile_dir=args.compile_dir)
        runner.compile()
        seconds = measure_steps(model, runner, WIDTHS, [KV], args.repeats)[0]
        compiled = {q: 1e3 * s for q, s in zip(WIDTHS, seconds)}
    lines = ["| part | " + " | ".join(f"q={q} ms | roofline | x" for q in WIDTHS) + " |", "|---" * (1 + 3 * len(WIDTHS)) + "|"]
    for part in parts[WIDTHS[0]]:
        cells = []
        for q in WIDTHS:
            bound = bounds[q].get(part)
            cells += [f"{parts[q][part]:.1f}", "" if bound is None else f"{bound:.1f}", "" if bound is None else f"{parts[q][part] / bound:.1f}"]
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines.append("| eager whole step, no clocks on the modules | " + " | ".join(
        f"{plain[q]:.1f} | {bounds[q]['whole step']:.1f} | {plain[q] / bounds[q]['whole step']:.1f}" for q in WIDTHS) + " |")
    if compiled:
        lines.append("| **compiled package, whole step** | " + " | ".join(
            f"{compiled[q]:.1f} | {bounds[q]['whole step']:.1f} | {compiled[q] / bounds[q]['whole step']:.1f}" for q in WIDTHS) + " |")
    meta = {"kv": KV, "repeats": args.repeats, "threads": 2, "bandwidth_bytes_per_s": bandwidth, "gemm_flops_per_s": gemm,
            "torch": torch.__version__, "compile_dir": bool(args.compile_dir)}
    save(args.out, "step_breakdown", "\n".join(lines), {"meta": meta, "eager_ms": parts, "eager_unclocked_ms": plain,
                                                        "roofline_ms": bounds, "compiled_ms": compiled})


def save(folder: str | None, stem: str, table: str, data: dict) -> None:
    """Print the markdown `table`; with a `folder`, write it there as <stem>.md and `data` as <stem>.json."""
    print(table)
    if folder:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
        (out / f"{stem}.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
