"""``python -m ladref bench --host-overhead``: the host work each forward pass carries, per decoder and batch size.

    python -m ladref bench --host-overhead --batch 1,4,16 --max-new-tokens 48 --out runs/host

On a GPU the forward pass of a small model is short, and what the host does around it (Python,
dispatching torch ops, reading values back from the device) sets the speed. This measures that
host work on a CPU, where a tiny model's pass is cheap: a float32 Llama built from its config
(2 layers, hidden 64, intermediate 128, 4 heads, 2 key/value heads, vocabulary 512, SDPA
attention, seeded random weights; `tiny_llama`), B repetitive prompts (row b: a random period of
5-8 tokens repeated to 60 + b tokens; `repetitive_prompts`), one torch thread. Each decoder of
`HOST_METHODS` decodes the batch, always given as a list of prompts (a batch of one too), with no
end-of-sequence token; transformers' batched ``generate`` (left padding, an attention mask,
``min_new_tokens = max_new_tokens``) is the anchor, and adaptive decoding prices its steps on a
synthetic GPU-like surface (`ladref.bench.host_meter.ADAPTIVE_SURFACE`). Every figure is per forward pass and a
difference of two calls, ``max_new_tokens`` and `SHORT_TOKENS` new tokens, over the difference in
passes, so the prompts' prefill and the set-up do not count: the wall time; the host work, that
wall time less the time inside the model's forward (timed by hooks on the model); the top-level
``aten::`` ops (torch.profiler, every thread), all and those outside the model's forward (a
``record_function`` range opened and closed by the same hooks); and the host's reads of device
values (`ladref.bench.host_meter.READ_OPS`, which sync on CUDA, plus ``tolist()`` / ``numpy()`` calls counted by a
``sys.setprofile`` hook; ``item()`` counts through its ``aten::_local_scalar_dense``). Times are
the figures of the measurement protocol's rounds (`ladref.bench.protocol`: the calls in turns, each
at least ``--rounds`` times, a disturbed call measured again, one that never settles flagged); ops
and reads come from separate profiled runs.
Everything outside the model's forward is host work here, ladref's own output head included: on a
CPU a pass of 2-256 rows computes it as ``W @ h^T`` after the model's forward
(`ladref.head.forward_logits`), which on a GPU would be device work; and a copy to the host
(``.cpu()``) costs nothing on a CPU, so it is not counted as a read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from .host_meter import ADAPTIVE_SURFACE, HOST_CALLS, host_decoders, profiled, repetitive_prompts, timed, tiny_llama
from .methods import one_of
from .protocol import Protocol, Sample, disturbed, figure, rounds, settled
from .protocol import timed as clocked

HOST_METHODS = ("greedy", "prompt_lookup", "lookahead", "recycling", "adaptive", "jacobi", "generate")
DRAFTING = ("prompt_lookup", "lookahead", "recycling", "adaptive", "jacobi")
HOST_BATCHES = (1, 4, 16)
HOST_TOKENS = 48
SHORT_TOKENS = 2
NOTE = ("Host work = wall time less the time inside the model's forward; it includes ladref's own output head "
        "(W @ h^T for passes of 2-256 rows on a CPU, outside the model's forward: ladref.head.forward_logits), "
        "which a GPU would run on the device. Reads = aten::_local_scalar_dense (item(), int(t), bool(t)), nonzero, "
        "masked_select, unique* and tolist()/numpy() calls; .cpu() copies are free on a CPU and not counted.")


@dataclass(frozen=True)
class HostPoint:
    """One decoder at one batch size; every figure per forward pass, the long call's less the short one's.

    Attributes:
        method: one of `HOST_METHODS`; batch: B, the rows.
        passes: the forward passes the extra tokens took; tokens_per_pass: their new tokens (all rows) per pass.
        ms_per_pass, forward_ms_per_pass, host_ms_per_pass: wall time, inside the model's forward, and the rest.
        ops_per_pass, host_ops_per_pass: top-level aten ops, all and outside the model's forward.
        reads_per_pass: host reads (scalar + sync + tolist + numpy); reads: per kind, and ``item`` calls.
        match: every row's tokens equal greedy's (ladref's batched greedy), at the long call.
        rounds: timed calls (long and short); disturbed: those the protocol judged disturbed;
        flagged: the calls (of the two) that never settled.
    """

    method: str
    batch: int
    passes: int
    tokens_per_pass: float
    ms_per_pass: float
    forward_ms_per_pass: float
    host_ms_per_pass: float
    ops_per_pass: float
    host_ops_per_pass: float
    reads_per_pass: float
    reads: dict[str, float]
    match: bool
    rounds: int = 0
    disturbed: int = 0
    flagged: int = 0


def _tokens(result: object) -> list[list[int]]:
    return result.tolist() if isinstance(result, torch.Tensor) else result.token_ids


def measure_host_overhead(model: torch.nn.Module, batches: Sequence[int] = HOST_BATCHES, methods: Sequence[str] = HOST_METHODS,
                          max_new_tokens: int = HOST_TOKENS, rounds: int = 3,
                          progress: Callable[[str], None] | None = None, protocol: Protocol | None = None) -> list[HostPoint]:
    """Profile each (B, method) once, then time them in protocol rounds (at least `rounds`), methods in
    turns; one `HostPoint` each. `protocol`: the rules (default `Protocol` with ``min_rounds=rounds``
    and this process's torch threads).

    Raises:
        ValueError: an unknown method, a batch below 1, ``max_new_tokens <= SHORT_TOKENS`` or rounds below 1.
    """
    for method in methods:
        one_of(method, HOST_METHODS, "host-overhead method {!r}")
    if min(batches, default=0) < 1 or max_new_tokens <= SHORT_TOKENS or rounds < 1:
        raise ValueError(f"need batches >= 1, max_new_tokens > {SHORT_TOKENS} and rounds >= 1; got {list(batches)}, "
                         f"{max_new_tokens}, {rounds}")
    decoders, note = host_decoders(), (lambda _: None) if progress is None else progress
    calls = {(b, m, n): (lambda d=decoders[m], p=repetitive_prompts(b), n=n: d(model, p, n))
             for b in batches for m in methods for n in (max_new_tokens, SHORT_TOKENS)}
    counts, outputs = {}, {}
    for (b, m, n), call in calls.items():  # 1. profiled runs (also the warm-up)
        note(f"profiling {m} B={b} {n} tokens")
        counts[b, m, n], result = profiled(model, call)
        outputs[b, m, n] = _tokens(result)
    if protocol is None:
        protocol = Protocol(min_rounds=rounds, max_rounds=max(rounds, Protocol().max_rounds), threads=torch.get_num_threads())
    samples, clocks = _timed_rounds(model, calls, protocol, note)
    points = []
    for b in batches:  # 3. per pass: long call less short call
        greedy = outputs.get((b, "greedy", max_new_tokens))
        if greedy is None:  # greedy not among the methods: its tokens still decide `match`
            greedy = _tokens(decoders["greedy"](model, repetitive_prompts(b), max_new_tokens))
        for m in methods:
            long, short = counts[b, m, max_new_tokens], counts[b, m, SHORT_TOKENS]
            passes = long["passes"] - short["passes"]
            per = {k: (long[k] - short[k]) / passes for k in ("ops", "host_ops", "scalar", "sync", *HOST_CALLS)}
            keys = [(b, m, max_new_tokens), (b, m, SHORT_TOKENS)]
            (lw, lf, lp), (sw, sf, sp) = (clocks[k][samples[k].index(figure(samples[k], protocol))] for k in keys)
            wall, host = 1e3 * (lw - sw) / (lp - sp), 1e3 * ((lw - lf) - (sw - sf)) / (lp - sp)
            counted = [(len(samples[k]), sum(disturbed(samples[k], protocol)), not settled(samples[k], protocol)) for k in keys]
            reads = per["scalar"] + per["sync"] + per["tolist"] + per["numpy"]
            points.append(HostPoint(m, b, passes, b * (max_new_tokens - SHORT_TOKENS) / passes, wall, wall - host, host,
                                    per["ops"], per["host_ops"], reads, {k: per[k] for k in ("scalar", "sync", *HOST_CALLS)},
                                    outputs[b, m, max_new_tokens] == greedy, *(sum(c[i] for c in counted) for i in range(3))))
    return points


def _timed_rounds(model: torch.nn.Module, calls: dict[tuple, Callable], protocol: Protocol,
                  note: Callable[[str], None]) -> tuple[dict[tuple, list[Sample]], dict[tuple, list[tuple[float, float, int]]]]:
    """Every call in protocol rounds, in turns: its samples, and each sample's (wall s, forward s, passes)."""
    clocks: dict[tuple, list[tuple[float, float, int]]] = {key: [] for key in calls}

    def measure(key: tuple) -> Sample:
        measured, sample = clocked(lambda: timed(model, calls[key]))
        clocks[key].append(measured)
        return replace(sample, steps=max(1, measured[2]))

    note(f"timing {len(calls)} calls in protocol rounds")
    return rounds(list(calls), measure, protocol), clocks


def host_ratios(points: Sequence[HostPoint]) -> dict:
    """The ratios the targets are stated in, between the smallest B (``low_batch``) and the largest (``high_batch``).

    Returns:
        ``host_growth``, ``ops_growth``, ``host_ops_growth``: per method, host ms / all ops / host ops a pass at the
        largest B over the smallest; ``max_reads_per_pass``: per method, at any B; ``greedy_host_over_generate``:
        batched greedy's host ms a pass at the largest B over generate's (None without both); ``host_over_greedy``:
        each drafting method's host ms a pass at the largest B over batched greedy's.
    """
    by = {(p.method, p.batch): p for p in points}
    methods = list(dict.fromkeys(p.method for p in points))
    low, high = min(p.batch for p in points), max(p.batch for p in points)

    def over(top: float, bottom: float) -> float | None:
        return top / bottom if bottom > 0 else None

    def growth(field: str) -> dict[str, float | None]:
        return {m: over(getattr(by[m, high], field), getattr(by[m, low], field)) for m in methods}

    greedy, generate = by.get(("greedy", high)), by.get(("generate", high))
    return {"low_batch": low, "high_batch": high, "host_growth": growth("host_ms_per_pass"),
            "ops_growth": growth("ops_per_pass"), "host_ops_growth": growth("host_ops_per_pass"),
            "max_reads_per_pass": {m: max(p.reads_per_pass for p in points if p.method == m) for m in methods},
            "greedy_host_over_generate": over(greedy.host_ms_per_pass, generate.host_ms_per_pass) if greedy and generate else None,
            "host_over_greedy": {m: over(by[m, high].host_ms_per_pass, greedy.host_ms_per_pass)
                                 for m in methods if m in DRAFTING} if greedy else {}}


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def host_markdown(points: Sequence[HostPoint], ratios: dict, meta: dict) -> str:
    """The per-pass table (method x B), the ratios table, and the notes, as markdown."""
    s = meta["settings"]
    lines = [f"Host work per forward pass: tiny float32 Llama ({s['model']}), {meta['machine']}; {meta['git_commit']}; "
             f"{s['max_new_tokens']} less {SHORT_TOKENS} new tokens a row, times the median undisturbed round of at least "
             f"{s['rounds']} (the measurement protocol)", "",
             "| method | B | passes | tokens/pass | ms/pass | host ms/pass | host % | ops/pass | host ops/pass | reads/pass | = greedy | "
             "rounds | flagged |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for p in sorted(points, key=lambda p: (HOST_METHODS.index(p.method), p.batch)):
        lines.append(f"| {p.method} | {p.batch} | {p.passes} | {p.tokens_per_pass:.1f} | {p.ms_per_pass:.2f} | "
                     f"{p.host_ms_per_pass:.2f} | {100 * p.host_ms_per_pass / p.ms_per_pass:.0f} | {p.ops_per_pass:.0f} | "
                     f"{p.host_ops_per_pass:.0f} | {p.reads_per_pass:.1f} | {'yes' if p.match else 'NO'} | {p.rounds} | {p.flagged} |")
    low, high = ratios["low_batch"], ratios["high_batch"]
    lines += ["", f"| method | host B={high} / B={low} | ops B={high} / B={low} | host ops B={high} / B={low} | "
              f"max reads/pass | host / batched greedy's, B={high} |", "|---|---:|---:|---:|---:|---:|"]
    for m in ratios["host_growth"]:
        lines.append(f"| {m} | {_cell(ratios['host_growth'][m])} | {_cell(ratios['ops_growth'][m])} | "
                     f"{_cell(ratios['host_ops_growth'][m])} | {ratios['max_reads_per_pass'][m]:.1f} | "
                     f"{_cell(ratios['host_over_greedy'].get(m))} |")
    lines += ["", f"Batched greedy's host work a pass at B={high} / generate's: {_cell(ratios['greedy_host_over_generate'])}.",
              "", NOTE, f"adaptive prices its steps on {s['adaptive_surface']}."]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``bench --host-overhead`` (it also reads --batch, --max-new-tokens, --method, --threads, --out)."""
    add = parser.add_argument
    add("--host-overhead", action="store_true", help="measure each decoder's host work per forward pass on a tiny "
        f"random model instead (ladref.bench.host): --batch (default {','.join(map(str, HOST_BATCHES))}), --max-new-tokens "
        f"(default {HOST_TOKENS}), --method from {', '.join(HOST_METHODS)} (default all), --threads (default 1)")
    add("--rounds", type=int, default=3, help="--host-overhead and the load benchmark (--batch): timed rounds at least, "
        "decoders in turns, more where the measurement protocol asks (ladref.bench.protocol; default 3)")


def run_host_command(args: argparse.Namespace) -> int:
    """Measure, print the tables, save ``host_overhead.md`` and ``host_overhead.json`` in ``--out``."""
    from ..pricing.surface import CostSurface
    from .runinfo import default_out, run_meta

    try:
        methods = list(dict.fromkeys(one_of(n.strip(), HOST_METHODS, "host-overhead method {!r}")
                                     for v in (args.method or HOST_METHODS) for n in v.split(",") if n.strip()))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from err
    batches, tokens = tuple(args.batch or HOST_BATCHES), args.max_new_tokens or HOST_TOKENS
    progress = None if args.no_progress else lambda text: print(f"  {text}", file=sys.stderr, flush=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads or 1)
    try:
        model = tiny_llama()
        points = measure_host_overhead(model, batches, methods, tokens, args.rounds, progress)
        meta = dict(run_meta(model), settings={
            "model": "2 layers, hidden 64, intermediate 128, 4 heads, 2 key/value heads, vocabulary 512, sdpa, seed 0",
            "prompts": "row b: a random period of 5-8 tokens repeated to 60 + b tokens, seed 0", "batches": list(batches),
            "methods": methods, "max_new_tokens": tokens, "short_tokens": SHORT_TOKENS, "rounds": args.rounds,
            "threads": torch.get_num_threads(), "adaptive_surface": CostSurface.roofline(*ADAPTIVE_SURFACE).label,
            "lookahead": "4/4/4", "prompt_lookup_draft_len": 4, "jacobi_block_size": 4})
    finally:
        torch.set_num_threads(threads)
    ratios, out = host_ratios(points), Path(args.out or default_out())
    text = host_markdown(points, ratios, meta)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "note": NOTE, "ratios": ratios, "points": [asdict(p) for p in points]}
    (out / "host_overhead.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "host_overhead.md").write_text(text + "\n")
    print("\n" + text + f"\n\nsaved {out / 'host_overhead.md'} and {out / 'host_overhead.json'}")
    return 0
