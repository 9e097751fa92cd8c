"""Spec-Bench's leaderboard layout: one row per method; per task its speedup and mean accepted
tokens; then overall.

The headline speedup is Spec-Bench's: over transformers' `generate()` (greedy, its default
cache; Spec-Bench's "vanilla autoregressive" baseline), when the run has that row, as the
geometric mean of per-prompt speedups with a 95% bootstrap interval over prompts
(`ladref.bench.protocol.speedup`); over ladref's `greedy_decode` is the second column. The
pooled figure (total tokens / total wall time over the baseline's on the same prompts) is kept
beside it (`TaskScore.speedup`, over greedy). Mean accepted tokens (S) is total tokens / total
steps, Spec-Bench's "#Mean Accepted Tokens". Spec-Bench's own ``evaluation/speed.py`` pools
speed as the mean over prompts of each prompt's tokens/s over greedy's mean; that figure is kept
too (`TaskScore.speedup_mean_rate`, JSON and CSV only).

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
from .protocol import Speedup, speedup


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
    "recycling": Reference("Recycling", 2.73, 2.22), "recycling_warm": Reference("Recycling", 2.73, 2.22),
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
        compression: S = tokens / steps, mean accepted tokens.
        speedup: pooled, (tokens / wall_s) / greedy's (tokens / wall_s), same prompts.
        speedup_mean_rate: Spec-Bench's pooling: mean per-prompt tokens/s / greedy's mean.
        vs_greedy: the geometric mean of per-prompt speedups over greedy, its interval and pooled figure.
        vs_generate: the same over transformers' `generate()` (None without that row).
        flagged: prompts whose figure the protocol flagged (measured on a disturbed machine).
    """

    prompts: int
    tokens: int
    steps: int
    wall_s: float
    identical: int
    compression: float
    speedup: float
    speedup_mean_rate: float
    vs_greedy: Speedup | None = None
    vs_generate: Speedup | None = None
    flagged: int = 0


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


def against(rows: Sequence[PromptRecord], base: Sequence[PromptRecord] | None) -> Speedup | None:
    """`rows` over `base`, prompt for prompt (`ladref.bench.protocol.speedup`); None without a baseline,
    a prompt the baseline lacks, a time or a token."""
    by = {r.prompt_id: r for r in base or ()}
    if not by or any(r.prompt_id not in by for r in rows) or any(
            r.wall_s <= 0 or r.new_tokens == 0 for r in [*rows, *by.values()]):
        return None
    return speedup([(r.new_tokens, r.wall_s) for r in rows], [(by[r.prompt_id].new_tokens, by[r.prompt_id].wall_s) for r in rows])


def task_score(rows: Sequence[PromptRecord], greedy: Sequence[PromptRecord],
               generate: Sequence[PromptRecord] | None = None) -> TaskScore:
    """One method's records against greedy's (and `generate()`'s) records of the same prompts."""
    tokens, steps, base, base_mean = sum(r.new_tokens for r in rows), sum(r.steps for r in rows), _rate(greedy), _mean_rate(greedy)
    return TaskScore(len(rows), tokens, steps, sum(r.wall_s for r in rows), sum(r.match for r in rows),
                     tokens / steps if steps else 0.0, _rate(rows) / base if base > 0 else 0.0,
                     _mean_rate(rows) / base_mean if base_mean > 0 else 0.0,
                     against(rows, greedy), against(rows, generate), sum(r.flagged for r in rows))


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
    generate = [r for r in records if r.method == "generate"] or None
    board = []
    for method in dict.fromkeys(r.method for r in records):
        mine = [r for r in records if r.method == method]
        per_task = {t: task_score([r for r in mine if r.task == t], greedy[t], generate and [r for r in generate if r.task == t])
                    for t in tasks}
        board.append(LeaderboardRow(method, per_task, task_score(mine, everyone, generate), reference.get(method_name(method))))
    return board


def _cell(score: TaskScore, generate: bool) -> str:
    """The headline cell: the geometric mean over generate() (or greedy) and its 95% interval."""
    chosen = score.vs_generate if generate else score.vs_greedy
    return chosen.text() if chosen is not None else f"{score.speedup:.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows])


def leaderboard_markdown(board: Sequence[LeaderboardRow]) -> str:
    """The leaderboard as Markdown, two narrow tables with one row per method: the speedup over
    `generate()` (over greedy without that row) per task and overall with its interval, the pooled
    figure, over greedy, identical outputs and flags; then mean accepted tokens per task, overall
    and the reference."""
    tasks = list(board[0].tasks) if board else []
    over_generate = bool(board) and board[0].overall.vs_generate is not None
    base = "`generate()`" if over_generate else "ladref `greedy_decode`"

    def pooled(s: TaskScore) -> str:
        chosen = s.vs_generate if over_generate else s.vs_greedy
        return f"{chosen.pooled:.2f}x" if chosen else f"{s.speedup:.2f}x"

    speed = _table(["method", *tasks, "overall", "pooled", *(["over greedy_decode"] if over_generate else []),
                    "identical to greedy", "flagged"], [
        [row.method, *(_cell(s, over_generate) for s in row.tasks.values()), _cell(row.overall, over_generate),
         pooled(row.overall), *([_cell(row.overall, False)] if over_generate else []),
         "reference" if row.method == "greedy" else f"{row.overall.identical}/{row.overall.prompts}",
         str(row.overall.flagged)] for row in board])
    steps = _table(["method", *tasks, "overall", "Spec-Bench"], [
        [row.method, *(f"{s.compression:.2f}" for s in row.tasks.values()), f"{row.overall.compression:.2f}",
         f"{row.reference.compression:.2f}" if row.reference else "-"] for row in board])
    return (f"Speedup over {base}: the geometric mean of per-prompt speedups [95% bootstrap interval over prompts]; "
            "pooled: total tokens / total time over the baseline's; flagged: prompts measured on a disturbed "
            f"machine (`ladref.bench.protocol`):\n\n{speed}\n\nMean accepted tokens (S, tokens per step: total "
            "tokens / total steps; Spec-Bench: the leaderboard's overall mean accepted tokens for the same algorithm, "
            f"Vicuna-7B on an A100, a reference, not a speed to compare with):\n\n{steps}")


def leaderboard_dicts(board: Sequence[LeaderboardRow]) -> list[dict]:
    """JSON-ready rows (`leaderboard_from_dicts` reads them back)."""
    return [asdict(row) for row in board]


def _score(fields: dict) -> TaskScore:
    speedups = {k: Speedup(**fields[k]) if fields.get(k) else None for k in ("vs_greedy", "vs_generate")}
    return TaskScore(**{**fields, **speedups})


def leaderboard_from_dicts(rows: Sequence[dict]) -> list[LeaderboardRow]:
    """The rows of `leaderboard_dicts`, as `LeaderboardRow` objects."""
    return [LeaderboardRow(r["method"], {t: _score(s) for t, s in r["tasks"].items()}, _score(r["overall"]),
                           Reference(**r["reference"]) if r.get("reference") else None) for r in rows]


def save_leaderboard_csv(board: Sequence[LeaderboardRow], path: str | Path) -> Path:
    """One CSV row per method: per task and overall its speedup, S, Spec-Bench-pooled speedup and
    identical count, then the reference S."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = ("speedup", "compression", "speedup_mean_rate", "identical", "prompts", "flagged")
    rows = []
    for row in board:
        cells = {"method": row.method}
        for task, score in [*row.tasks.items(), ("overall", row.overall)]:
            cells.update({f"{task}_{f}": getattr(score, f) for f in fields})
            for base in ("greedy", "generate"):
                chosen = getattr(score, f"vs_{base}")
                cells.update({f"{task}_vs_{base}_{k}": getattr(chosen, k) if chosen else None for k in ("geomean", "low", "high")})
        cells["specbench_S"] = row.reference.compression if row.reference else None
        rows.append(cells)
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["method"])
        writer.writeheader()
        writer.writerows(rows)
    return out
