"""What a student copy holds of each task: released as work, shipped solved, or a stub only.

Every function of every task is a stub in a copy unless the copy says otherwise (`plan`):

* the tasks released as *work* (one assignment's, ``--assignment N``; or ``--tasks``; by default
  all nine) are stubs with their ``# TODO`` steps, and the copy ships their handouts, answers
  files and public tests;
* the tasks shipped *solved* (``--solved``: an assignment's number or task markers, e.g.
  assignment 1's reference files for assignment 2's copy) keep the reference's code; nothing else
  of theirs ships;
* every other task is a stub, and nothing else of it ships.

The library functions doing a task's job (`tasks.Task.library_copies`) are stubbed with the task
until its assignment is over: they ship whole in a later assignment's copy (the *earlier* tasks,
whose solutions such a copy may show, `CopyPlan.past`), with the task solved, and in the module of a
task released as work, which calls them (so a copy releasing tasks 1.1-1.3 and 2.2 together ships
the one-file decoder's helpers: hand each assignment out in a copy of its own).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import TASKS, Task, task_by_marker, tasks_of  # noqa: E402


@dataclass(frozen=True)
class CopyPlan:
    """The tasks of a copy, in table order: `work` (released), `solved` (reference code), the rest stubs."""

    work: tuple[Task, ...]
    solved: tuple[Task, ...] = ()

    @property
    def stubbed(self) -> tuple[Task, ...]:
        """Every task whose functions the copy stubs: all but the solved ones."""
        return tuple(task for task in TASKS if task not in self.solved)

    @property
    def earlier(self) -> tuple[Task, ...]:
        """The stubbed tasks of assignments before the work's first one: the student's own earlier work."""
        first = min((task.assignment for task in self.work), default=0)
        return tuple(task for task in self.stubbed if task.assignment < first)

    def library_stubs(self) -> list[tuple[Task, str, tuple[str, ...]]]:
        """(task, module, functions) of the library copies the copy stubs: those of the stubbed tasks but
        the earlier assignments', except in the module of a task released as work (the work calls them:
        task 2.2's loop calls the one-file decoder's own pool, mask and verifier)."""
        work_modules = {task.module for task in self.work}
        return [(task, module, functions) for task in self.stubbed if task not in self.earlier
                for module, functions in task.library_functions().items() if module not in work_modules]

    @property
    def past(self) -> set[str]:
        """Markers whose solutions the copy may show (in tutorials): the solved and the earlier tasks."""
        return {task.marker for task in (*self.solved, *self.earlier)}

    @property
    def doable(self) -> set[str]:
        """Markers a student of this copy can have finished or has: work, solved and earlier tasks."""
        return self.past | {task.marker for task in self.work}


def markers_of(items: list[str] | tuple[str, ...], option: str) -> list[str]:
    """Task markers from a list of markers and assignment numbers ("1" -> task1_1 ... task1_6).

    Raises:
        TypeError: `items` is not a list of str; ValueError: an unknown task or assignment.
    """
    if isinstance(items, str) or not all(isinstance(item, str) for item in items):
        raise TypeError(f"{option} takes a list of task markers or assignment numbers, got {items!r}")
    found: list[str] = []
    for item in items:
        found += [t.marker for t in tasks_of(int(item))] if item.isdigit() else [task_by_marker(item).marker]
    return list(dict.fromkeys(found))


def plan(assignment: int | None = None, tasks: list[str] | None = None, solved: list[str] | tuple[str, ...] = ()) -> CopyPlan:
    """The `CopyPlan` of a copy.

    Args:
        assignment: release this assignment's tasks as work.
        tasks: release these task markers as work (not with `assignment`).
        solved: markers or assignment numbers to ship solved (never a task released as work).

    Returns:
        The plan; with neither `assignment` nor `tasks`, every task is work (no solution ships).

    Raises:
        ValueError: both `assignment` and `tasks`, an empty `tasks`, unknown names, or a task both
            released and solved. TypeError: arguments of the wrong type.
    """
    if assignment is not None and tasks is not None:
        raise ValueError("choose the released tasks with --assignment or with --tasks, not both")
    if tasks is not None and not tasks:
        raise ValueError("--tasks needs at least one task marker")
    if assignment is not None:
        work = {t.marker for t in tasks_of(assignment)}
    elif tasks is not None:
        work = set(markers_of(tasks, "--tasks"))
    else:
        work = {t.marker for t in TASKS}
    done = set(markers_of(solved, "--solved"))
    both = sorted(work & done)
    if both:
        raise ValueError(f"{', '.join(both)} cannot be both released as work and shipped solved")
    return CopyPlan(tuple(t for t in TASKS if t.marker in work), tuple(t for t in TASKS if t.marker in done))
