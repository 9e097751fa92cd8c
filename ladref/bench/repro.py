"""Does a committed comparison hold when rerun? A slice of its prompts, measured again, against it.

`slice_command` turns a committed result's command into the same command on its first prompts
(``--limit`` per dataset, per task for Spec-Bench: the committed run's first prompts are the
slice's), writing elsewhere. `compare` sets, per method, the rerun's speedup against the
committed one on the same prompts, both over the same baseline (`generate()` when the run has
it, else greedy), and says whether the rerun lands inside the committed 95% interval.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .protocol import Speedup, speedup


@dataclass(frozen=True)
class ReproRow:
    """One method, committed against rerun, on the same prompts.

    Attributes:
        method: the row's label.
        prompts: prompts both runs measured.
        committed: the committed run's speedup on them (geometric mean, 95% interval, pooled).
        rerun: the rerun's.
        ratio: rerun over committed geometric mean.
        inside: the rerun's geometric mean lies inside the committed interval.
        flagged: prompts the rerun flagged (measured on a disturbed machine).
        same_work: both runs took the same steps on every prompt. A method that learns across prompts
            (a warm matrix, a memory) has learned from other prompts before a slice's: it does other
            work, and its speed is no test of the committed figure.
    """

    method: str
    prompts: int
    committed: Speedup
    rerun: Speedup
    ratio: float
    inside: bool
    flagged: int
    same_work: bool = True


def slice_command(command: str, per_dataset: int, out: str) -> list[str]:
    """The arguments after ``python -m ladref bench`` of `command` with ``--limit per_dataset`` and ``--out out``."""
    words = shlex.split(command)
    if words[:3] != ["python", "-m", "ladref"] or len(words) < 4 or words[3] != "bench":
        raise ValueError(f"not a `python -m ladref bench` command: {command!r}")
    args, i = [], 4
    while i < len(words):
        if words[i] in ("--limit", "--out"):
            i += 2
            continue
        args.append(words[i])
        i += 1
    return [*args, "--limit", str(per_dataset), "--out", out]


def _key(record: dict) -> tuple[str, str]:
    """A prompt's key across datasets: (its task or dataset, its id)."""
    return (record.get("task", ""), record["prompt_id"])


def _pairs(records: Sequence[dict], method: str, ids: Sequence[tuple[str, str]]) -> list[tuple[int, float]]:
    by = {_key(r): r for r in records if r["method"] == method}
    return [(by[i]["new_tokens"], by[i]["wall_s"]) for i in ids]


def _steps(records: Sequence[dict], method: str, ids: Sequence[tuple[str, str]]) -> list[int | None]:
    by = {_key(r): r for r in records if r["method"] == method}
    return [by[i].get("steps") for i in ids]


def compare(committed: Sequence[dict], rerun: Sequence[dict]) -> tuple[str, list[ReproRow]]:
    """(the baseline, one `ReproRow` per method besides it) over the prompts the rerun measured.

    Raises:
        ValueError: a prompt of the rerun that the committed run lacks.
    """
    ids = list(dict.fromkeys(map(_key, rerun)))
    known = set(map(_key, committed))
    missing = [i for i in ids if i not in known]
    if missing:
        raise ValueError(f"the committed result has no prompt {missing[0][1]!r}: a slice must be its first prompts")
    methods = list(dict.fromkeys(r["method"] for r in rerun))
    base = "generate" if "generate" in methods else "greedy"
    rows = []
    for method in (m for m in methods if m != base):
        before = speedup(_pairs(committed, method, ids), _pairs(committed, base, ids))
        after = speedup(_pairs(rerun, method, ids), _pairs(rerun, base, ids))
        flagged = sum(bool(r.get("flagged")) for r in rerun if r["method"] == method)
        same = _steps(committed, method, ids) == _steps(rerun, method, ids)
        rows.append(ReproRow(method, len(ids), before, after, after.geomean / before.geomean,
                             before.low <= after.geomean <= before.high, flagged, same))
    return base, rows


def repro_markdown(base: str, rows: Sequence[ReproRow], committed_meta: dict, rerun_meta: dict) -> str:
    """The report: what was rerun where, and a table of committed against rerun per method."""
    name = "`generate()`" if base == "generate" else "`greedy_decode`"
    lines = [f"Committed: commit `{str(committed_meta.get('git_commit'))[:7]}`, {committed_meta.get('machine', '?')}. "
             f"Rerun: commit `{str(rerun_meta.get('git_commit'))[:7]}`, {rerun_meta.get('machine', '?')}, "
             f"command `{rerun_meta.get('command', '?')}`.", "",
             f"Speedup over {name} on the same {rows[0].prompts if rows else 0} prompts: geometric mean [95% bootstrap "
             "interval over prompts].", "",
             "| method | committed | rerun | rerun / committed | inside the committed interval | flagged in the rerun |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.method} | {r.committed.text()} | {r.rerun.text()} | {r.ratio:.3f} | "
              f"{('yes' if r.inside else 'no') if r.same_work else 'not the same work'} | {r.flagged} |" for r in rows]
    learned = [r.method for r in rows if not r.same_work]
    if learned:
        lines += ["", f"Not the same work: {', '.join(learned)} took other steps on these prompts than in the committed "
                  "run: a method that learns across prompts has learned from other prompts before a slice's, so its "
                  "speed there is no test of the committed figure."]
    within = [r for r in rows if r.same_work]
    if within:
        lines += ["", f"Of the other {len(within)}: {sum(abs(r.ratio - 1) <= 0.12 for r in within)} within 12% of the "
                  f"committed figure, {sum(r.inside for r in within)} inside its interval."]
    return "\n".join(lines) + "\n"


def repro_dicts(rows: Sequence[ReproRow]) -> list[dict]:
    """JSON-ready rows."""
    return [asdict(r) for r in rows]
