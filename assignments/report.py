"""The autograder's reports: a plain summary and Gradescope's ``results.json`` layout.

Gradescope reads ``/autograder/results/results.json``: a top-level "score" (it overrides the sum
of the tests), "tests" as a list of {"name", "score", "max_score", "status", "output",
"visibility", ...}, and optional "output", "visibility", "stdout_visibility", "execution_time"
and "extra_data". One test entry is written per test group; hidden groups are shown
"after_due_date".
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path


def points(value: Fraction) -> str:
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def summary(grade) -> str:
    """The plain report of an `autograde.Grade`: a line per task, its failing test groups, the total."""
    lines = [f"graded {grade.submission} ({'public and hidden tests' if grade.hidden else 'public tests only'})"]
    width = max((len(t.task.title) for t in grade.tasks), default=0)
    for t in grade.tasks:
        head = f"  task {t.task.number:<4} {t.task.title:<{width}} {points(t.score):>6} / {t.task.points:<3}"
        if t.error:
            lines += [f"{head} could not be tested", *(f"      {line}" for line in t.error.splitlines()[-12:])]
            continue
        done = sum(g.fraction == 1 for g in t.groups)
        lines.append(f"{head} {done} of {len(t.groups)} test groups passed")
        for g in t.groups:
            if g.failures:
                nodeid, message = g.failures[0]
                kind = "hidden test" if g.hidden else "test"
                reason = message.splitlines()[0][:160] if message else ""
                where = nodeid if len(g.outcomes) == 1 else f"{g.name}, {len(g.failures)} of {len(g.outcomes)} cases (first: {nodeid.split('::')[-1]})"
                lines.append(f"      failed {kind} {where}: {reason}")
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
            output = "\n".join(f"{nodeid}: {message}" for nodeid, message in g.failures[: 1 if g.hidden else 10])
            tests.append({
                "name": f"Task {t.task.number} ({t.task.title}): {'hidden: ' if g.hidden else ''}{g.name}",
                "number": f"{t.task.number}.{i}", "score": round(float(earned), 2), "max_score": round(float(possible), 2),
                "status": "passed" if g.fraction == 1 else "failed", "output": output[:5000],
                "visibility": "after_due_date" if g.hidden else "visible", "tags": [t.task.marker, "hidden" if g.hidden else "public"],
            })
    return {
        "score": round(float(grade.score), 2),
        "execution_time": round(grade.seconds),
        "output": summary(grade),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"max_score": grade.max_score, "tasks": {t.task.marker: round(float(t.score), 2) for t in grade.tasks}},
    }


def write_results(grade, results: Path | None, summary_path: Path | None) -> None:
    for path, text in ((results, json.dumps(gradescope(grade), indent=1)), (summary_path, summary(grade))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
