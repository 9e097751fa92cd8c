"""The autograder's reports: a plain summary and Gradescope's ``results.json`` layout.

Gradescope reads ``/autograder/results/results.json``: a top-level "score" (it overrides the sum
of the tests), "tests" as a list of {"name", "score", "max_score", "status", "output",
"visibility", ...}, and optional "output", "visibility", "stdout_visibility", "execution_time"
and "extra_data". One test entry is written per test group; hidden groups are shown
"after_due_date"; the top-level "output", which students see at once, speaks of the visible
groups only. A task whose judge measures (the open task's modelled speed-up) adds its mean to the
summary and, from its visible cases, to Gradescope's "leaderboard".
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from tasks import answers_file


def points(value: Fraction) -> str:
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def summary(grade, visible_only: bool = False) -> str:
    """The plain report of a `grades.Grade`: a line per task, its failing groups, the total.

    With `visible_only`, the hidden groups' results are left out (the score of a task with hidden
    groups is then not shown either: it would tell how the hidden groups went).
    """
    kind = "visible and hidden groups" if grade.hidden else "public tests only: a self-check, not a grade"
    lines = [f"graded {grade.submission} ({kind})"]
    width = max((len(t.task.title) for t in grade.tasks), default=0)
    for t in grade.tasks:
        head = f"  task {t.task.number:<4} {t.task.title:<{width}} {points(t.score):>6} / {t.task.points:<3}"
        if t.error:
            lines += [f"{head} could not be tested", *(f"      {line}" for line in t.error.splitlines()[-12:])]
            continue
        shown = [g for g in t.groups if not (visible_only and g.hidden)]
        done = sum(g.fraction == 1 for g in shown)
        if visible_only and len(shown) < len(t.groups):
            earned = sum((t.group_points(g)[0] for g in shown), Fraction(0))
            possible = sum((t.group_points(g)[1] for g in shown), Fraction(0))
            head = f"  task {t.task.number:<4} {t.task.title:<{width}} visible groups {points(earned)} / {points(possible)},"
            lines.append(f"{head} {done} of {len(shown)} passed (hidden groups: after the due date)")
        else:
            lines.append(f"{head} {done} of {len(shown)} test groups passed")
        measured = t.measured(visible_only)
        if measured is not None:
            what, value, cases = measured
            lines.append(f"      {what}: {value:.2f} (the mean of {cases} {'visible ' if visible_only else ''}cases)")
        if t.answers is not None:
            lines.append(f"      written answers ({t.task.question_points} points, graded by hand): "
                         + (f"{answers_file(t.task)} handed in" if t.answers else f"none yet: write them in {answers_file(t.task)}"))
        for g in shown:
            if g.failures:
                nodeid, message = g.failures[0]
                kind = "hidden test" if g.hidden else "test"
                if grade.hidden:  # a probe group: the first failing call, its arguments, expected and got
                    lines.append(f"      failed {kind} group {g.name}: {len(g.failures)} of {len(g.outcomes)} cases; the first:")
                    lines += [f"        {line}" for line in message.splitlines()]
                    continue
                reason = message.splitlines()[0][:160] if message else ""
                where = nodeid if len(g.outcomes) == 1 else f"{g.name}, {len(g.failures)} of {len(g.outcomes)} cases (first: {nodeid.split('::')[-1]})"
                lines.append(f"      failed {kind} {where}: {reason}")
    if not visible_only:
        lines += [f"note: {note}" for note in grade.notes]
        lines.append(f"score: {points(grade.score)} / {grade.max_score}")
    return "\n".join(lines) + "\n"


def gradescope(grade) -> dict:
    """An `autograde.Grade` in Gradescope's ``results.json`` layout (one test entry per test group)."""
    tests = []
    for t in grade.tasks:
        if t.error or not t.groups:
            tests.append({"name": f"Task {t.task.number} ({t.task.title})", "number": t.task.number, "score": 0,
                          "max_score": t.task.points, "status": "failed", "output": t.error or "", "visibility": "visible",
                          "tags": [t.task.marker]})
            continue
        for i, g in enumerate(t.groups, 1):
            earned, possible = t.group_points(g)
            output = "\n\n".join(message for _, message in g.failures[:1]) if grade.hidden else \
                "\n".join(f"{nodeid}: {message}" for nodeid, message in g.failures[:10])
            if g.failures and grade.hidden:
                output = f"{len(g.failures)} of {len(g.outcomes)} cases failed; the first:\n{output}"
            tests.append({
                "name": f"Task {t.task.number} ({t.task.title}): {'hidden: ' if g.hidden else ''}{g.name}",
                "number": f"{t.task.number}.{i}", "score": round(float(earned), 2), "max_score": round(float(possible), 2),
                "status": "passed" if g.fraction == 1 else "failed", "output": output[:5000],
                "visibility": "after_due_date" if g.hidden else "visible", "tags": [t.task.marker, "hidden" if g.hidden else "public"],
            })
    # a leaderboard from the visible cases only, as students see it at once (hidden cases: after the due date)
    board = [{"name": f"task {t.task.number}: {m[0]}", "value": round(m[1], 3), "order": "desc"}
             for t in grade.tasks if (m := t.measured(visible_only=True)) is not None]
    return {
        "score": round(float(grade.score), 2),
        "execution_time": round(grade.seconds),
        "output": summary(grade, visible_only=True),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"max_score": grade.max_score, "tasks": {t.task.marker: round(float(t.score), 2) for t in grade.tasks},
                       "seed": grade.seed, "notes": grade.notes,
                       "answers": {t.task.marker: t.answers for t in grade.tasks if t.answers is not None},
                       "measured": {t.task.marker: {"what": m[0], "mean": round(m[1], 4), "cases": m[2]}
                                    for t in grade.tasks if (m := t.measured()) is not None}},
        **({"leaderboard": board} if board else {}),
    }


def leaderboard(grades: list) -> tuple[str, str] | None:
    """(CSV, printed ranking) of several submissions' `grades.Grade` by each measured task's mean
    metric (`grades.TaskGrade.measured`, every case, the hidden ones included; a task that could
    not be graded counts 0), best first; None when no graded task measures anything.

    The CSV has a row per task and submission: task, rank, submission, metric, value, points.
    """
    rows, lines = ["task,rank,submission,metric,value,points"], []
    markers = [t.task.marker for t in grades[0].tasks] if grades else []
    for marker in markers:
        entries = [(g.submission.name, next(t for t in g.tasks if t.task.marker == marker)) for g in grades]
        what = next((m[0] for _, t in entries if (m := t.measured()) is not None), None)
        if what is None:
            continue
        value = {name: (t.measured() or (what, 0.0, 0))[1] for name, t in entries}
        ranked = sorted(entries, key=lambda entry: (-value[entry[0]], -entry[1].score, entry[0]))
        lines.append(f"leaderboard, task {ranked[0][1].task.number} ({what}, the mean over every case):")
        for rank, (name, t) in enumerate(ranked, 1):
            rows.append(f"{marker},{rank},{name},{what},{value[name]:.4f},{points(t.score)}")
            lines.append(f"  {rank:>3}. {name}: {value[name]:.2f} ({points(t.score)} / {t.task.points} points)")
    return ("\n".join(rows) + "\n", "\n".join(lines) + "\n") if lines else None


def write_results(grade, results: Path | None, summary_path: Path | None) -> None:
    for path, text in ((results, json.dumps(gradescope(grade), indent=1)), (summary_path, summary(grade))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
