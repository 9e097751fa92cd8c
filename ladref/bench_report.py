"""Aggregate benchmark records and write them as Markdown, JSON and CSV."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .bench_run import PromptRecord


@dataclass(frozen=True)
class MethodSummary:
    """One method over all prompts of a run.

    Attributes:
        method: the decoder.
        prompts: prompts run.
        tokens: tokens generated in total.
        steps: decoding steps in total.
        compression: S = tokens / steps.
        tokens_per_second: tokens / total wall time.
        speedup: greedy's total wall time / this method's, same prompts, same run.
        speedup_vs_plookup: prompt lookup's total wall time / this method's (None without plookup).
        flops_ratio: estimated decoding FLOPs / greedy's.
        match_rate: fraction of prompts whose output equals greedy's.
        peak_mem_mib: the largest `PromptRecord.peak_mem_mib`.
        gflops_per_step: estimated decoding GFLOPs per step (`ladref.flops`).
        ms_per_step: total wall time / steps (the prefill is included in the wall time).
    """

    method: str
    prompts: int
    tokens: int
    steps: int
    compression: float
    tokens_per_second: float
    speedup: float
    speedup_vs_plookup: float | None
    flops_ratio: float
    match_rate: float
    peak_mem_mib: float
    gflops_per_step: float
    ms_per_step: float


def summarize(records: Sequence[PromptRecord]) -> list[MethodSummary]:
    """Per-method totals, in the order the methods first appear (greedy first)."""
    methods = list(dict.fromkeys(r.method for r in records))
    if "greedy" not in methods:
        raise ValueError("the records hold no greedy run, the reference of every ratio")
    wall = {m: sum(r.wall_s for r in records if r.method == m) for m in methods}
    flops = {m: sum(r.flops for r in records if r.method == m) for m in methods}
    summaries = []
    for m in methods:
        rows = [r for r in records if r.method == m]
        tokens, steps = sum(r.new_tokens for r in rows), sum(r.steps for r in rows)
        summaries.append(MethodSummary(
            method=m,
            prompts=len(rows),
            tokens=tokens,
            steps=steps,
            compression=tokens / steps if steps else 0.0,
            tokens_per_second=tokens / wall[m] if wall[m] > 0 else 0.0,
            speedup=wall["greedy"] / wall[m] if wall[m] > 0 else 0.0,
            speedup_vs_plookup=wall["plookup"] / wall[m] if "plookup" in wall and wall[m] > 0 else None,
            flops_ratio=flops[m] / flops["greedy"] if flops["greedy"] else 0.0,
            match_rate=sum(r.match for r in rows) / len(rows),
            peak_mem_mib=max(r.peak_mem_mib for r in rows),
            gflops_per_step=flops[m] / steps / 1e9 if steps else 0.0,
            ms_per_step=1e3 * wall[m] / steps if steps else 0.0,
        ))
    return summaries


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown_table(summaries: Sequence[MethodSummary], label: str = "") -> str:
    """A Markdown table of the summaries (one row per method)."""
    head = ("| dataset | method | prompts | tokens | steps | S | tok/s | speedup vs greedy | speedup vs plookup "
            "| GFLOP/step | ms/step | FLOPs ratio | match rate | peak mem (MiB) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summaries:
        lines.append(
            f"| {label} | {s.method} | {s.prompts} | {s.tokens} | {s.steps} | {s.compression:.2f} | "
            f"{s.tokens_per_second:.1f} | {s.speedup:.2f}x | {_fmt(s.speedup_vs_plookup)}{'x' if s.speedup_vs_plookup else ''} | "
            f"{s.gflops_per_step:.2f} | {s.ms_per_step:.1f} | {s.flops_ratio:.1f} | {s.match_rate:.0%} | {s.peak_mem_mib:.0f} |"
        )
    return "\n".join(lines)


def save_results(path_stem: str | Path, records: Sequence[PromptRecord], summaries: Sequence[MethodSummary],
                 meta: dict | None = None) -> tuple[Path, Path]:
    """Write ``<stem>.json`` (meta, summary, per-prompt records) and ``<stem>.csv`` (per-prompt rows).

    Returns:
        (json path, csv path); parent folders are created.
    """
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".csv")
    rows = [dict(asdict(r), tokens_per_second=r.tokens_per_second) for r in records]
    payload = {"meta": meta or {}, "summary": [asdict(s) for s in summaries], "records": rows}
    json_path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["prompt_id"])
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path
