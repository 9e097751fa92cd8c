"""The self-check: a student's copy graded on its public tests, with pytest, task by task.

    python assignments/autograde.py [TASK ...]     # in a student copy (or --public-only)

Each task is checked on its own, in a pytest subprocess: a temporary package made of the
folder's ``ladref/`` with the task's file (`tasks.Task.module`) copied over it, tested by the
tests carrying the task's marker in ``tests/``. A test group is a test function (all its
parametrizations and Hypothesis examples), weighted by ``@pytest.mark.points``. A file that does
not import, a missing file or a run killed at ``--task-timeout`` before its tests were collected
scores the task 0 with the error shown; a test running past ``--test-timeout`` fails and the rest
of its test function's cases fail unrun.

The tests run in the same process as the code they check, so this is feedback for the student,
never a grade: the autograder (`autograde.py` with the reference's ``assignments/hidden/``)
computes its verdicts outside the submission's process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grades import Grade, GroupGrade, TaskGrade
from tasks import Task, marked_files

HERE = Path(__file__).resolve().parent
TEST_TIMEOUT_S = 60.0
TASK_TIMEOUT_S = 600.0
# for the pytest processes only: no .pyc files in the checked folders, and one torch thread
QUIET_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


def submitted_file(submission: Path, module: str) -> Path | None:
    """The submission's copy of `module` ("ladref/masks.py"): at that path, at the top, or one level down."""
    for candidate in (submission / module, submission / Path(module).name):
        if candidate.is_file():
            return candidate
    found = sorted(submission.glob(f"*/{module}"))
    return found[0] if len(found) == 1 else None


def task_file(submission: Path, task: Task, reference: Path) -> Path | None:
    """The submission's file for `task` (`submitted_file`); the reference repository graded as a submission
    gives its own answer where it keeps it (`Task.reference_file`: a course answer the library does not hold)."""
    found = submitted_file(submission, task.module)
    kept = reference / task.reference_file
    if found is None and submission.resolve() == reference.resolve() and kept.is_file():
        return kept
    return found


def run_pytest(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int | None, str]:
    """Run pytest in its own process group; on timeout kill the whole group. Returns (exit code or None, output)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output


def read_report(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def task_grade(task: Task, records: list[dict], timed_out: float | None) -> TaskGrade:
    """Turn the plugin's records of one run into a `TaskGrade`."""
    errors = [r for r in records if "collect_error" in r]
    collected = next((r["collected"] for r in records if "collected" in r), None)
    if errors:  # every test file imports ladref: the first error says it all
        last = [line for line in errors[0]["message"].splitlines() if line.strip()][-6:]
        return TaskGrade(task, [], f"the submitted code does not import ({errors[0]['collect_error']} could not be loaded):\n"
                         + "\n".join(last))
    if collected is None:
        why = f"the run was stopped at the {timed_out:g} s limit before its tests started" if timed_out else "pytest did not start"
        return TaskGrade(task, [], why)
    outcomes: dict[str, tuple[str, str]] = {}
    for r in records:
        if "outcome" in r and outcomes.get(r["nodeid"], ("",))[0] != "failed":  # a failure anywhere sticks
            outcomes[r["nodeid"]] = (r["outcome"], r.get("message", ""))
    started = [r["started"] for r in records if "started" in r]
    if timed_out and started and started[-1] not in outcomes:
        outcomes[started[-1]] = ("failed", f"the task's run was stopped at its {timed_out:g} s limit here")
    groups: dict[str, GroupGrade] = {}
    for item in collected:
        if task.marker in item["tasks"]:
            group = groups.setdefault(item["group"], GroupGrade(item["group"], item["points"], False))
            group.outcomes[item["nodeid"]] = outcomes.get(item["nodeid"], ("failed", "not run"))
    if not groups:
        return TaskGrade(task, [], f"no test carries the marker {task.marker}")
    return TaskGrade(task, list(groups.values()))


def grade_task(task: Task, student: Path, reference: Path, work: Path, *, test_timeout: float = TEST_TIMEOUT_S,
               task_timeout: float = TASK_TIMEOUT_S, pytest_args: list[str] | None = None) -> TaskGrade:
    """Check one task of `student` with the public tests, on `reference`'s other files (see the module doc)."""
    start = time.perf_counter()
    source = task_file(student, task, reference)
    if source is None:
        return TaskGrade(task, [], f"the submission has no {task.module}")
    package = work / task.marker
    shutil.copytree(reference / "ladref", package / "ladref", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(source, package / task.module)
    tests = marked_files(reference / "tests", [task.marker])
    report = work / f"{task.marker}.jsonl"
    cmd = [
        sys.executable, "-m", "pytest", *map(str, tests), "-c", str(reference / "pyproject.toml"),
        "--rootdir", str(reference), "--confcutdir", str(reference / "tests"), "-o", "pythonpath=", "-o", "addopts=",
        "-p", "no:cacheprovider", "-p", "grading_plugin", "--grading-report", str(report), "-m", task.marker, "-q",
        "--hypothesis-profile=grading", "--test-timeout", str(test_timeout), *(pytest_args or []),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, [package, HERE, reference / "tests"])), **QUIET_ENV)
    code, output = run_pytest(cmd, work, env, task_timeout)
    records = read_report(report)
    origin = next((r["ladref"] for r in records if "ladref" in r), None)
    if origin is not None and package.resolve() not in Path(origin).resolve().parents:
        raise RuntimeError(f"the tests imported ladref from {origin}, not from the graded package {package}")
    result = task_grade(task, records, None if code is not None else task_timeout)
    if result.error and not records:  # pytest itself failed: show why
        result.error += "\n" + output[-2000:]
    result.error = result.error and result.error.replace(str(package), str(student))
    result.seconds = time.perf_counter() - start
    return result


def check(student: Path, tasks: list[Task], reference: Path, **options) -> Grade:
    """Check the tasks `tasks` of `student` on the public tests of `reference` (a `Grade` without hidden groups)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ladref-check-") as tmp:
        graded = [grade_task(task, student, reference, Path(tmp), **options) for task in tasks]
    return Grade(student, graded, False, time.perf_counter() - start)
