"""Spec-Bench's leaderboard layout: one row per method; per task its speedup over greedy and S;
then overall.

Pooling (the same for a task and for overall): a method's speedup is its total tokens / total
wall time over the prompts, divided by greedy's on the same prompts (`ladref.greedy_decode`, run
interleaved with it); S is its total tokens / total steps. Spec-Bench's "#Mean Accepted Tokens"
(the mean over all steps of the tokens each step accepted) is the same ratio. Spec-Bench's own
``evaluation/speed.py`` pools speed differently: the mean over prompts of each prompt's tokens/s,
over greedy's mean; that figure is kept too (`TaskScore.speedup_mean_rate`, JSON and CSV only).

Nothing here knows the methods: the rows are whatever labels the records carry, and the only
per-method data is `SPECBENCH_REFERENCE`, the leaderboard's published S for the same algorithm.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .measure import PromptRecord
from .methods import method_name


@dataclass(frozen=True)
class Reference:
    """A published Spec-Bench figure for the algorithm a method implements.

    Attributes:
        name: the algorithm's name on the leaderboard ("Lookahead", "PLD", "Recycling").
        compression: its overall S ("#Mean Accepted Tokens").
        speedup: its overall speedup there (a GPU figure: not comparable with a run on another machine).
    """

    name: str
    compression: float
    speedup: float


REFERENCE_SOURCE = ("Spec-Bench Leaderboard.md (hemingkx/Spec-Bench, commit fd2c1cd), Vicuna-7B-v1.3, float16, "
                    "greedy, batch 1, one NVIDIA A100: overall figures")
_LOOKAHEAD, _PLD = Reference("Lookahead", 1.64, 1.34), Reference("PLD", 1.75, 1.66)
SPECBENCH_REFERENCE: dict[str, Reference] = {
    "lookahead": _LOOKAHEAD, "compiled_lookahead": _LOOKAHEAD,
    "hf_plookup": _PLD, "prompt_lookup": _PLD,
    "recycling": Reference("Recycling", 2.73, 2.22),
}
"""Method name (`ladref.bench.methods.method_name`) -> the leaderboard's figure for its algorithm."""


@dataclass(frozen=True)
class TaskScore:
    """One method on one task, or on all prompts (overall).

    Attributes:
        prompts: prompts run.
        tokens: tokens generated in total.
        steps: decoding steps in total.
        wall_s: wall time in total (prefill included).
        identical: prompts whose output equals greedy's.
        compression: S = tokens / steps.
        speedup: (tokens / wall_s) / greedy's (tokens / wall_s), same prompts.
        speedup_mean_rate: Spec-Bench's pooling: mean per-prompt tokens/s / greedy's mean.
    """

    prompts: int
    tokens: int
    steps: int
    wall_s: float
    identical: int
    compression: float
    speedup: float
    speedup_mean_rate: float


@dataclass(frozen=True)
class LeaderboardRow:
    """One method: its score per task (in the run's task order), overall, and the reference."""

    method: str
    tasks: dict[str, TaskScore]
    overall: TaskScore
    reference: Reference | None


def _rate(rows: Sequence[PromptRecord]) -> float:
    wall = sum(r.wall_s for r in rows)
    return sum(r.new_tokens for r in rows) / wall if wall > 0 else 0.0


def _mean_rate(rows: Sequence[PromptRecord]) -> float:
    return sum(r.tokens_per_second for r in rows) / len(rows)


def task_score(rows: Sequence[PromptRecord], greedy: Sequence[PromptRecord]) -> TaskScore:
    """Pool one method's records against greedy's records of the same prompts."""
    tokens, steps, base, base_mean = sum(r.new_tokens for r in rows), sum(r.steps for r in rows), _rate(greedy), _mean_rate(greedy)
    return TaskScore(len(rows), tokens, steps, sum(r.wall_s for r in rows), sum(r.match for r in rows),
                     tokens / steps if steps else 0.0, _rate(rows) / base if base > 0 else 0.0,
                     _mean_rate(rows) / base_mean if base_mean > 0 else 0.0)


def leaderboard(records: Sequence[PromptRecord],
                reference: Mapping[str, Reference] = SPECBENCH_REFERENCE) -> list[LeaderboardRow]:
    """One row per method (in the records' order, greedy first), tasks in the order they appear.

    Raises:
        ValueError: no records, or no greedy record for a task.
    """
    if not records:
        raise ValueError("no records to rank")
    tasks = list(dict.fromkeys(r.task for r in records))
    greedy = {t: [r for r in records if r.method == "greedy" and r.task == t] for t in tasks}
    missing = [t for t, rows in greedy.items() if not rows]
    if missing:
        raise ValueError(f"no greedy run, the baseline of every speedup, for task(s) {missing}")
    everyone = [r for rows in greedy.values() for r in rows]
    board = []
    for method in dict.fromkeys(r.method for r in records):
        mine = [r for r in records if r.method == method]
        per_task = {t: task_score([r for r in mine if r.task == t], greedy[t]) for t in tasks}
        board.append(LeaderboardRow(method, per_task, task_score(mine, everyone), reference.get(method_name(method))))
    return board


def leaderboard_markdown(board: Sequence[LeaderboardRow]) -> str:
    """The leaderboard as Markdown, two narrow tables with one row per method: the speedup over greedy
    per task, overall and the outputs identical to greedy's; then S per task, overall and the reference S."""
    tasks = list(board[0].tasks) if board else []

    def table(header: list[str], rows: list[list[str]]) -> str:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows])

    speed = table(["method", *tasks, "overall", "identical"], [
        [row.method, *(f"{s.speedup:.2f}x" for s in row.tasks.values()), f"{row.overall.speedup:.2f}x",
         f"{row.overall.identical}/{row.overall.prompts}"] for row in board])
    steps = table(["method", *tasks, "overall", "Spec-Bench"], [
        [row.method, *(f"{s.compression:.2f}" for s in row.tasks.values()), f"{row.overall.compression:.2f}",
         f"{row.reference.compression:.2f}" if row.reference else "-"] for row in board])
    return ("Speedup over ladref `greedy_decode` (overall: all prompts pooled, total tokens / total time over "
            f"greedy's):\n\n{speed}\n\nS, tokens per step (overall: total tokens / total steps; Spec-Bench: the "
            "leaderboard's overall S for the same algorithm, Vicuna-7B on an A100, a reference, not a speed to "
            f"compare with):\n\n{steps}")


def leaderboard_dicts(board: Sequence[LeaderboardRow]) -> list[dict]:
    """JSON-ready rows (`leaderboard_from_dicts` reads them back)."""
    return [asdict(row) for row in board]


def leaderboard_from_dicts(rows: Sequence[dict]) -> list[LeaderboardRow]:
    """The rows of `leaderboard_dicts`, as `LeaderboardRow` objects."""
    return [LeaderboardRow(r["method"], {t: TaskScore(**s) for t, s in r["tasks"].items()}, TaskScore(**r["overall"]),
                           Reference(**r["reference"]) if r.get("reference") else None) for r in rows]


def save_leaderboard_csv(board: Sequence[LeaderboardRow], path: str | Path) -> Path:
    """One CSV row per method: per task and overall its speedup, S, Spec-Bench-pooled speedup and
    identical count, then the reference S."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = ("speedup", "compression", "speedup_mean_rate", "identical", "prompts")
    rows = []
    for row in board:
        cells = {"method": row.method}
        for task, score in [*row.tasks.items(), ("overall", row.overall)]:
            cells.update({f"{task}_{f}": getattr(score, f) for f in fields})
        cells["specbench_S"] = row.reference.compression if row.reference else None
        rows.append(cells)
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["method"])
        writer.writeheader()
        writer.writerows(rows)
    return out
