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
