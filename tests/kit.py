"""Importing the course kit's scripts in the tests (``assignments/`` is a folder of scripts, not a package)."""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"


def load(name: str):
    """Import assignments/<name>.py, with the folder on the path as the scripts themselves have it."""
    if str(ASSIGNMENTS) not in sys.path:
        sys.path.insert(0, str(ASSIGNMENTS))
    return importlib.import_module(name)


@functools.cache
def reference_answers() -> tuple:
    """The autograder's record of the reference's answers to every task's probes (seed 0), made
    once per test run (`autograde.prepare`: a process per task) and shared by the tests that grade
    with it, as `autograde.grade` makes it once per call: (tasks, snapshot, expected, seed)."""
    with tempfile.TemporaryDirectory(prefix="ladref-reference-") as tmp:
        return load("autograde").prepare(ROOT, None, 0, Path(tmp))


def rewritten(source: str, changes: list[tuple[str, str]], module: str) -> str:
    """`source` (the reference's `module`) with each (right, wrong) pair's right text, found exactly once, replaced."""
    for right, wrong in changes:
        assert source.count(right) == 1, f"the reference's {module} changed: {right!r}"
        source = source.replace(right, wrong)
    return source


def defined_in(text: str, filename: str, *names: str) -> tuple:
    """The objects `names` of a module's source `text`, executed apart (a test's own variant of a reference)."""
    namespace: dict = {"__name__": Path(filename).stem}
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - the tests' own variants of the reference
    return tuple(namespace[name] for name in names)
