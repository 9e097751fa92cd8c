"""Grade a student's ladref with the library's own tests, task by task.

    python assignments/autograde.py [TASK ...] [--student DIR] [--tests DIR] [-- PYTEST_ARGS]

Runs ``pytest -m "task1_1 or ..."`` in a subprocess whose ``import ladref`` resolves to
``DIR/ladref`` (DIR first on PYTHONPATH, the working directory a fresh temporary folder), then
reports each task as passed (every selected test with its marker passed or was skipped, at least
one passed) or failed; a test file that fails to import fails its task. It checks where ``ladref`` was imported from and refuses to grade if that
is not the student's copy.

Defaults are relative to this file, so the same script works in the reference repository
(``--student`` = the reference itself) and in a generated student folder (its own copy).
Exit status: 0 when every graded task passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import TASKS, task_by_marker  # noqa: E402

ROOT = HERE.parent


@dataclass
class Grade:
    """The autograder's verdict.

    Attributes:
        ladref_file: the `ladref/__init__.py` the tests imported.
        passed: task marker -> True if all its tests passed (skips allowed, at least one pass).
        failed_tests: task marker -> node ids of its failing tests.
        returncode: pytest's exit status.
        output: pytest's combined stdout and stderr.
    """

    ladref_file: str
    passed: dict[str, bool]
    failed_tests: dict[str, list[str]]
    returncode: int
    output: str

    @property
    def failed_tasks(self) -> set[str]:
        return {marker for marker, ok in self.passed.items() if not ok}


def grade(
    student: Path = ROOT,
    markers: list[str] | None = None,
    tests: Path = ROOT / "tests",
    config: Path = ROOT / "pyproject.toml",
    pytest_args: list[str] | None = None,
) -> Grade:
    """Run the marked tests against ``student/ladref``.

    Args:
        student: folder holding the student's `ladref` package.
        markers: tasks to grade; None means every task.
        tests: the test folder to run (the library's tests).
        config: the pytest configuration file (declares the task markers).
        pytest_args: extra pytest arguments, e.g. ["--hypothesis-profile=ci"] (default profile:
            "grading", the quick settings without shrinking).

    Returns:
        The `Grade`.

    Raises:
        RuntimeError: when pytest did not run, or imported `ladref` from elsewhere.
    """
    pytest_args = list(pytest_args or [])
    if not any(a.startswith("--hypothesis-profile") for a in pytest_args):
        pytest_args.append("--hypothesis-profile=grading")  # registered by grading_plugin
    markers = [t.marker for t in TASKS] if markers is None else [task_by_marker(m).marker for m in markers]
    student = student.resolve()
    if not (student / "ladref" / "__init__.py").is_file():
        raise FileNotFoundError(f"no ladref package in {student}")
    with tempfile.TemporaryDirectory(prefix="ladref-grade-") as work:
        report = Path(work) / "report.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(student), str(HERE)]), PYTHONDONTWRITEBYTECODE="1")
        cmd = [
            sys.executable, "-m", "pytest", str(tests.resolve()),
            "-c", str(config.resolve()), "--rootdir", str(tests.resolve().parent),
            "-p", "no:cacheprovider", "-p", "grading_plugin", "--grading-report", str(report),
            "-m", " or ".join(markers), "-q", "--continue-on-collection-errors", *pytest_args,
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        output = proc.stdout + proc.stderr
        if not report.exists():
            raise RuntimeError(f"pytest did not finish (exit {proc.returncode}):\n{output[-3000:]}")
        data = json.loads(report.read_text())
    ladref_file = Path(data["ladref_file"]).resolve()
    if student not in ladref_file.parents:
        raise RuntimeError(f"the tests imported ladref from {ladref_file}, not from {student}")
    passed, failed_tests = {}, {}
    for marker in markers:
        mine = [t for t in data["tests"] if marker in t["tasks"]]
        failed_tests[marker] = [t["nodeid"] for t in mine if t["outcome"] not in ("passed", "skipped")]
        passed[marker] = bool(mine) and not failed_tests[marker] and any(t["outcome"] == "passed" for t in mine)
    return Grade(str(ladref_file), passed, failed_tests, proc.returncode, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade ladref tasks with the library's own tests.")
    parser.add_argument("tasks", nargs="*", metavar="TASK", help="task markers to grade (default: all)")
    parser.add_argument("--student", type=Path, default=ROOT, help="folder holding the student's ladref/")
    parser.add_argument("--tests", type=Path, default=ROOT / "tests", help="test folder (default: %(default)s)")
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml", help="pytest config file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print pytest's output")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    result = grade(args.student, args.tasks or None, args.tests, args.config, extra)
    if args.verbose:
        print(result.output)
    print(f"graded {result.ladref_file}")
    for marker, ok in result.passed.items():
        task = task_by_marker(marker)
        print(f"  {marker} {task.title:<30} {'PASS' if ok else 'FAIL'}")
        for nodeid in result.failed_tests[marker]:
            print(f"      failed: {nodeid}")
    score = sum(result.passed.values())
    print(f"score: {score}/{len(result.passed)}")
    return 0 if score == len(result.passed) else 1


if __name__ == "__main__":
    sys.exit(main())
