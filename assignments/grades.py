"""The autograder's verdicts: a test group's outcomes, a task's grade, a submission's grade.

A task's points are split over its groups by weight; a group earns its share times the fraction
of its cases (tests) that passed. Both engines fill these in: the grading one (`autograde.py`,
whose verdicts are computed outside the submission's process) and the self-check one
(`selfcheck.py`, the public tests run with pytest in a student's own copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from tasks import Task


@dataclass
class GroupGrade:
    """One group of a task: a probe group and its cases, or a public test function and its parametrizations.

    Attributes:
        name: the group's name ("verify_greedy (small tries)", or "test_file.py::test_function").
        weight: its share of the task's points (a probe's points, a test's points marker; default 1).
        hidden: True when its results are shown only after the due date.
        outcomes: case id (or node id) -> (outcome, message), outcome "passed", "failed" or "skipped".
        metric: what its judge measures of each case ("modelled speed-up over greedy"), or None.
        metrics: case id -> the measured number, None where nothing could be measured (a wrong
            answer, or none); only for a group whose judge measures.
    """

    name: str
    weight: int
    hidden: bool
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    metric: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)

    @property
    def fraction(self) -> Fraction:
        """Passed tests over graded ones (skips do not count either way)."""
        graded = [o for o, _ in self.outcomes.values() if o != "skipped"]
        return Fraction(graded.count("passed"), len(graded)) if graded else Fraction(0)

    @property
    def failures(self) -> list[tuple[str, str]]:
        return [(nodeid, message) for nodeid, (outcome, message) in self.outcomes.items() if outcome == "failed"]


@dataclass
class TaskGrade:
    """The verdict on one task.

    Attributes:
        task: the `Task`.
        groups: its test groups with their outcomes (empty when it could not be tested).
        error: why the task could not be tested (it then scores 0), else None.
        seconds: how long its run took.
        answers: whether the written answers' file was handed in (None: not looked for).
    """

    task: Task
    groups: list[GroupGrade]
    error: str | None = None
    seconds: float = 0.0
    answers: bool | None = None

    @property
    def total_weight(self) -> int:
        return sum(g.weight for g in self.groups)

    def group_points(self, group: GroupGrade) -> tuple[Fraction, Fraction]:
        """(earned, possible) points of one group."""
        possible = Fraction(self.task.points * group.weight, self.total_weight)
        return possible * group.fraction, possible

    @property
    def score(self) -> Fraction:
        if self.error or not self.groups:
            return Fraction(0)
        return sum((self.group_points(g)[0] for g in self.groups), Fraction(0))

    @property
    def passed(self) -> bool:
        return self.score == self.task.points

    def measured(self, visible_only: bool = False) -> tuple[str, float, int] | None:
        """(what, mean, cases): the mean of what the task's judges measured over its measured groups'
        cases (a case measured as nothing counts 0), or None when no group measures anything.

        Args:
            visible_only: the visible groups' cases only.
        """
        groups = [g for g in self.groups if g.metric is not None and not (visible_only and g.hidden)]
        values = [0.0 if v is None else v for g in groups for v in g.metrics.values()]
        if self.error or not values:
            return None
        return groups[0].metric, sum(values) / len(values), len(values)


@dataclass
class Grade:
    """The verdict on one submission.

    Attributes:
        submission: the folder graded.
        tasks: one `TaskGrade` per graded task.
        hidden: whether hidden tests were run (False: public tests only, a self-check).
        seconds: the whole run's duration.
        notes: what the instructor should know (the reference's files changed during the run...).
        seed: the seed the cases were drawn with (None for a self-check).
    """

    submission: Path
    tasks: list[TaskGrade]
    hidden: bool
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    seed: int | None = None

    @property
    def score(self) -> Fraction:
        return sum((t.score for t in self.tasks), Fraction(0))

    @property
    def max_score(self) -> int:
        return sum(t.task.points for t in self.tasks)

    @property
    def passed(self) -> dict[str, bool]:
        """Task marker -> full marks."""
        return {t.task.marker: t.passed for t in self.tasks}

    @property
    def failed_tasks(self) -> set[str]:
        return {marker for marker, ok in self.passed.items() if not ok}
