"""Aggregate benchmark records and write them as Markdown, JSON and CSV.

A run is shown as two narrow tables rather than one wide one: `speed_table` (S, tokens/s, the
speedups, identical outputs) and `cost_table` (steps, time and FLOPs per step, memory); the files
hold every field. Spec-Bench's
per-task leaderboard layout is `ladref.bench.leaderboard`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from .leaderboard import leaderboard_from_dicts, leaderboard_markdown
from .measure import PromptRecord
from .methods import canonical_label
from .summary import MethodSummary, summarize  # noqa: F401 (re-exported: the report's input)


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], datasets: Sequence[str] | None = None) -> str:
    if datasets is not None:
        header, rows = ["dataset", *header], [[d, *row] for d, row in zip(datasets, rows, strict=True)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _interval(value: dict | None, pooled: float | None) -> str:
    """"1.23x [1.10, 1.37]" from a `Speedup` dict; the pooled figure alone for a file from before intervals."""
    if value is None:
        return _fmt(pooled, "x")
    return f"{value['geomean']:.2f}x [{value['low']:.2f}, {value['high']:.2f}]"


def speed_table(summaries: Sequence[MethodSummary], datasets: Sequence[str] | None = None) -> str:
    """Markdown: method, mean accepted tokens (S), tokens/s, speedups, identical outputs, flags (one row per method).

    A speedup is the geometric mean of per-prompt speedups with its 95% bootstrap interval over
    prompts; the headline is over `generate()` when the run has that row, with its pooled figure
    beside it, then over greedy. With `datasets` (one label per summary), a first "dataset" column holds them.
    """
    generate = any(s.speedup_vs_generate is not None for s in summaries)
    compiled = any(s.vs_generate_compiled is not None for s in summaries)
    header = ["method", "mean accepted tokens", "tok/s", *(["vs generate() [95% CI]", "pooled"] if generate else []),
              "vs greedy_decode [95% CI]", *(["vs compiled generate() [95% CI]"] if compiled else []),
              "identical to greedy", "flagged"]
    rows = [[s.method, f"{s.compression:.2f}", f"{s.tokens_per_second:.1f}",
             *([_interval(s.vs_generate, s.speedup_vs_generate), _fmt(s.speedup_vs_generate, "x")] if generate else []),
             _interval(s.vs_greedy, s.speedup), *([_interval(s.vs_generate_compiled, None)] if compiled else []),
             "reference" if s.method == "greedy" else f"{s.identical}/{s.prompts}", str(s.flagged)] for s in summaries]
    return _table(header, rows, datasets)


def cost_table(summaries: Sequence[MethodSummary], datasets: Sequence[str] | None = None) -> str:
    """Markdown: method, steps, ms/step, GFLOP/step, FLOPs ratio, peak memory (the process's at a call's peak, and
    what a call added to what the process already held; `datasets` as in `speed_table`)."""
    header = ["method", "steps", "ms/step", "GFLOP/step", "FLOPs ratio", "peak mem (MiB)", "added by a call (MiB)"]
    rows = [[s.method, str(s.steps), f"{s.ms_per_step:.1f}", f"{s.gflops_per_step:.2f}",
             f"{s.flops_ratio:.1f}", f"{s.peak_mem_mib:.0f}", _fmt(s.added_mem_mib, digits=0)] for s in summaries]
    return _table(header, rows, datasets)


def markdown_tables(summaries: Sequence[MethodSummary], datasets: Sequence[str] | None = None) -> str:
    """`speed_table` and `cost_table`, one after the other."""
    return f"Speed:\n\n{speed_table(summaries, datasets)}\n\nCost:\n\n{cost_table(summaries, datasets)}"


def save_results(path_stem: str | Path, records: Sequence[PromptRecord], summaries: Sequence[MethodSummary],
                 meta: dict | None = None, extra: dict | None = None) -> tuple[Path, Path]:
    """Write ``<stem>.json`` (meta, summary, per-prompt records) and ``<stem>.csv`` (per-prompt rows).

    `extra` adds top-level keys to the JSON (e.g. "leaderboard").

    Returns:
        (json path, csv path); parent folders are created.
    """
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".csv")
    rows = [dict(asdict(r), tokens_per_second=r.tokens_per_second) for r in records]
    payload = {"meta": {} if meta is None else meta, "summary": [asdict(s) for s in summaries], **({} if extra is None else extra),
               "records": rows}
    json_path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["prompt_id"])
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path


def load_summaries(path: str | Path) -> tuple[dict, list[MethodSummary]]:
    """(meta, summaries) of a saved ``<dataset>.json``.

    Files from before a field existed get its value (`identical` from the match rate) or None;
    former method names are read as today's ("plookup" -> "hf_plookup").
    """
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = [MethodSummary(**{"speedup_vs_generate": None, "identical": round(row["match_rate"] * row["prompts"]),
                             **row, "method": canonical_label(row["method"])}) for row in payload["summary"]]
    return payload.get("meta", {}), rows


def plot_speedups(tables: dict[str, list[MethodSummary]], path: str | Path, title: str, baseline: str = "generate") -> Path:
    """A grouped bar chart: each method's speedup over `baseline` ("generate" or "greedy"), per dataset.

    Uses matplotlib's object API with the Agg canvas (no global backend switch, no display).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    methods = list(dict.fromkeys(s.method for rows in tables.values() for s in rows))
    fig = Figure(figsize=(min(12.0, max(6.0, 1.2 * len(methods) * len(tables) / 2)), 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(len(tables), 1)
    for i, (dataset, rows) in enumerate(tables.items()):
        by = {s.method: s for s in rows}
        values = [(by[m].speedup_vs_generate if baseline == "generate" else by[m].speedup) if m in by else 0.0 for m in methods]
        ax.bar([j + i * width for j in range(len(methods))], [v or 0.0 for v in values], width, label=dataset)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(tables) - 1) / 2 for j in range(len(methods))], methods, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"speedup over {'transformers generate()' if baseline == 'generate' else 'ladref greedy_decode'}")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def render_summary(folder: str | Path, chart: str = "speedups.png") -> str:
    """Markdown for a results folder: the machine, a speed and a cost table over all datasets, set-up
    costs, the leaderboard of each run that has one, agreement and a chart.

    Reads every ``<dataset>.json`` of the folder (and ``agreement_<dtype>.json`` files); writes the
    chart next to them when there are tables with a "generate" baseline. Datasets are shown under
    their current names ("math" files as gsm8k).
    """
    from .datasets import DATASET_ALIASES

    folder = Path(folder)
    tables, lines, setup, boards = {}, [], [], []
    for path in sorted(p for p in folder.glob("*.json") if not p.stem.startswith(("agreement", "scaling", "context", "cost", "repro"))):
        meta, rows = load_summaries(path)
        dataset = DATASET_ALIASES.get(meta.get("dataset", path.stem), meta.get("dataset", path.stem))
        tables[dataset] = rows
        if len(tables) == 1:
            at = f" at commit `{meta['git_commit'][:7]}{meta['git_commit'][40:]}`" if meta.get("git_commit") else ""
            lines += [f"Measured{at} on **{meta.get('machine', '?')}**, {meta.get('dtype', '?')}, torch {meta.get('torch', '?')}, "
                      f"transformers {meta.get('transformers', '?')}; command: `{meta.get('command', '?')}`.", ""]
        if meta.get("setup_s"):
            setup.append(f"{dataset}: " + ", ".join(f"{k} {v:.1f}" for k, v in meta["setup_s"].items()))
        board = json.loads(path.read_text(encoding="utf-8")).get("leaderboard")
        if board and len(board[0]["tasks"]) > 1:
            boards += [f"Leaderboard, {dataset}:", "", leaderboard_markdown(leaderboard_from_dicts(board)), ""]
    if tables:
        labels = [d for d, rows in tables.items() for _ in rows]
        lines += [markdown_tables([s for rows in tables.values() for s in rows], labels), ""]
    if setup:
        lines += ["One-time set-up, seconds (not in the tables): " + "; ".join(setup) + ".", ""]
    lines += boards
    for path in sorted(folder.glob("agreement_*.json")):
        lines += agreement_lines(json.loads(path.read_text(encoding="utf-8")))
    # the text between the markers is what a docs page includes (`--8<-- "<folder>/summary.md:tables"`);
    # the figures after them are linked from the folder, where a docs page cannot reach them
    lines = ["<!-- --8<-- [start:tables] -->", *(lines or ["No results in this folder yet.", ""]), "<!-- --8<-- [end:tables] -->", ""]
    curves = sorted(folder.glob("cost_*.png"))  # `bench --cost` figures, t(q) at each KV length
    if curves:
        lines += [f"![step cost t(q)]({p.name})" for p in curves] + [""]
    if any(s.speedup_vs_generate for rows in tables.values() for s in rows):
        plot_speedups(tables, folder / chart, f"Speedup over transformers generate() ({folder.name})")
        lines += [f"![speedups]({chart})", ""]
    return "\n".join(lines)


def agreement_lines(payload: dict) -> list[str]:
    """Markdown lines of one agreement file (see `ladref.bench.agreement`)."""
    from .agreement import AgreementRecord, summarize_agreement

    meta = payload.get("meta", {})
    lines = [f"Agreement in {meta.get('dtype', '?')} (near-tie: top-2 logit gap <= {meta.get('near_tie')}):", "",
             "| pair | prompts | identical | near-tie divergences | other divergences | gaps at divergences |",
             "|---|---|---|---|---|---|"]
    for s in summarize_agreement([AgreementRecord(**r) for r in payload["records"]]):
        lines.append(f"| {s.pair} | {s.prompts} | {s.identical} | {s.near_ties} | {s.other} | "
                     f"{', '.join(f'{g:.3f}' for g in s.gaps) or '-'} |")
    return lines + [""]
