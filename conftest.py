"""The reference repository's pytest set-up: the course's answers that the library does not hold,
imported under their task's module name.

A course answer that is no part of ladref (`Task.reference` in ``assignments/tasks.py``: task 2.3's
`CostAwareChoice`, in ``assignments/reference/course_choice.py``) is a module of the package wherever
its task is worked on or graded: a student copy holds it at ``ladref/course_choice.py`` (stubbed,
or whole where the copy ships the task solved), and the grader writes it there in every package it
makes. The public tests import it that way (``from ladref.course_choice import ...``), in a copy
and here alike. `CourseAnswers` answers those imports from ``assignments/`` when this repository's
package holds no such file; it sits right after the finder of files on `sys.meta_path`, before any
later finder (an editable install of another checkout) could give another checkout's file.

Nothing else sees it: the library itself never imports a course answer, a student copy has a
conftest.py of its own, and the self-check's pytest runs stop their conftest search at ``tests/``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def course_answers() -> dict[str, Path]:
    """{"ladref.course_choice": the answer's file}: `tasks.course_answers`, read from the task table."""
    spec = importlib.util.spec_from_file_location("_ladref_course_tasks", ROOT / "assignments" / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tasks  # a dataclass module must be importable while it is defined
    try:
        spec.loader.exec_module(tasks)
    finally:
        del sys.modules[spec.name]
    return {module.removesuffix(".py").replace("/", "."): ROOT / reference for module, reference in tasks.course_answers().items()}


class CourseAnswers(importlib.abc.MetaPathFinder):
    """Finds a course answer (`course_answers`) as a module of this repository's ladref, when ladref has no such file."""

    def __init__(self, answers: dict[str, Path]) -> None:
        self.answers = answers

    def find_spec(self, fullname, path=None, target=None):
        file = self.answers.get(fullname)
        if file is None or not path or Path(next(iter(path))).resolve() != ROOT / "ladref":
            return None  # not a course answer, or another ladref than this repository's
        return importlib.util.spec_from_file_location(fullname, file)  # its relative imports: ladref's modules


if not any(isinstance(finder, CourseAnswers) for finder in sys.meta_path):
    files = next((k for k, finder in enumerate(sys.meta_path) if finder is importlib.machinery.PathFinder), len(sys.meta_path) - 1)
    sys.meta_path.insert(files + 1, CourseAnswers(course_answers()))
