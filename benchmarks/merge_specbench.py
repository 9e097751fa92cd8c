"""Merge per-task Spec-Bench runs into one ``specbench.json`` with the leaderboard over all tasks.

A run over ``--dataset specbench:mt_bench,specbench:translation,...`` saves each task as it
finishes (``specbench_<task>.json``), so a long run that stops early keeps the tasks it completed.
This script pools their per-prompt records exactly as ``--dataset specbench`` would have
(`ladref.bench.leaderboard.leaderboard`) and writes ``specbench.json``, ``specbench.csv`` and
``specbench_leaderboard.csv`` into OUT; with ``--figure PNG`` also a chart of each method's speedup
over `greedy_decode` per task.

Usage:
    python benchmarks/merge_specbench.py RUN_FOLDER OUT_FOLDER [--figure PNG]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ladref.bench.leaderboard import REFERENCE_SOURCE, leaderboard, leaderboard_dicts, leaderboard_markdown, save_leaderboard_csv
from ladref.bench.measure import PromptRecord
from ladref.bench.report import plot_speedups, save_results, summarize


def mean_setup(payloads: list[dict]) -> dict[str, float]:
    """Each method's one-time set-up seconds, averaged over the task runs (each run set up anew)."""
    setups = [p["meta"].get("setup_s", {}) for p in payloads]
    methods = dict.fromkeys(k for s in setups for k in s)
    return {m: sum(s[m] for s in setups if m in s) / sum(m in s for s in setups) for m in methods}


def main(argv: list[str]) -> int:
    figure = None
    if "--figure" in argv[:-1]:
        at = argv.index("--figure")
        figure, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    if len(argv) != 2 or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    files = sorted(Path(argv[0]).glob("specbench_*.json"))  # the leaderboards are .csv
    if not files:
        print(f"no specbench_<task>.json in {argv[0]}", file=sys.stderr)
        return 1
    payloads = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    fields = set(PromptRecord.__dataclass_fields__)
    records = [PromptRecord(**{k: v for k, v in r.items() if k in fields}) for p in payloads for r in p["records"]]
    board = leaderboard(records)
    meta = dict(payloads[0]["meta"], dataset="specbench", merged_from=[f.name for f in files],
                setup_s=mean_setup(payloads), setup_s_note="mean over the per-task runs")
    extra = {"leaderboard": leaderboard_dicts(board), "leaderboard_reference": REFERENCE_SOURCE}
    stem = Path(argv[1]) / "specbench"
    paths = save_results(stem, records, summarize(records), meta, extra)
    board_csv = save_leaderboard_csv(board, stem.with_name("specbench_leaderboard.csv"))
    if figure:
        tasks = dict.fromkeys(r.task for r in records)
        plot_speedups({task: summarize([r for r in records if r.task == task]) for task in tasks}, figure,
                      f"Spec-Bench, {meta.get('machine', '?')}, {meta.get('dtype', '?')}: speedup per task", baseline="greedy")
    print(leaderboard_markdown(board))
    print(f"saved {paths[0]}, {paths[1]} and {board_csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
