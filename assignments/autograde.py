"""Grade ladref submissions task by task: partial credit, timeouts, a Gradescope results.json.

    python assignments/autograde.py [TASK ...]                        # this folder's own ladref
    python assignments/autograde.py --student DIR [--results FILE] [--summary FILE]
    python assignments/autograde.py --submissions DIR --out GRADES    # one sub-folder per student

Each task is graded on its own, in a subprocess: a temporary package made of the reference's
``ladref/`` with the submission's file for that task (`tasks.Task.module`) copied over it, tested
by the reference's tests carrying the task's marker, the public ones (``tests/``) and, where the
folder has them, the hidden ones (``hidden/``, parametrized with cases recorded from the reference
by ``hidden/cases.py`` once per run). So a mistake in one task never costs points in another, and
a student cannot edit the tests. In a student copy (no hidden tests, the "reference" is the
copy itself) the same command is a self-check on the public tests.

Scoring: a task's points are split over its test groups (one per test function, weighted by
``@pytest.mark.points``); a group earns its share times the fraction of its tests (its
parametrizations) that passed. A file that does not import (SyntaxError, ImportError), a missing
file or a run killed at ``--task-timeout`` before its tests were collected scores the task 0
with the error shown; a test running past ``--test-timeout`` fails, the rest of its test function's
cases fail unrun, and the run goes on. Submitted code runs unsandboxed: grade in a container.

Exit status: 0 when every graded task got full marks, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from report import points, summary, write_results  # noqa: E402
from tasks import TASKS, Task, marked_files, task_by_marker  # noqa: E402

ROOT = HERE.parent
TEST_TIMEOUT_S = 60.0
TASK_TIMEOUT_S = 600.0
# for the grading processes only: no .pyc files in the graded folders, and one torch thread (the
# tests' models are tiny, and several threads per process oversubscribe a small machine)
QUIET_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


@dataclass
class GroupGrade:
    """One test function of a task (all its parametrizations and examples).

    Attributes:
        name: "test_file.py::test_function".
        weight: its points marker (default 1).
        hidden: True for a hidden test (recorded from the reference, never shipped).
        outcomes: node id -> (outcome, message), outcome "passed", "failed" or "skipped".
    """

    name: str
    weight: int
    hidden: bool
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)

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
    """

    task: Task
    groups: list[GroupGrade]
    error: str | None = None
    seconds: float = 0.0

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


@dataclass
class Grade:
    """The verdict on one submission.

    Attributes:
        submission: the folder graded.
        tasks: one `TaskGrade` per graded task.
        hidden: whether hidden tests were run (False: public tests only, a self-check).
        seconds: the whole run's duration.
    """

    submission: Path
    tasks: list[TaskGrade]
    hidden: bool
    seconds: float = 0.0

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


def submitted_file(submission: Path, module: str) -> Path | None:
    """The submission's copy of `module` ("ladref/masks.py"): at that path, at the top, or one level down."""
    for candidate in (submission / module, submission / Path(module).name):
        if candidate.is_file():
            return candidate
    found = sorted(submission.glob(f"*/{module}"))
    return found[0] if len(found) == 1 else None


def record_hidden_cases(reference: Path, out: Path) -> Path | None:
    """Run the reference's ``hidden/cases.py`` into `out`; None when the folder has no hidden tests."""
    script = reference / "assignments" / "hidden" / "cases.py"
    if not script.is_file():
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(reference), str(reference / "tests")]), **QUIET_ENV)
    proc = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"recording the hidden cases from the reference failed:\n{proc.stdout}{proc.stderr}")
    return out


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


def task_grade(task: Task, records: list[dict], hidden_files: set[str], timed_out: float | None) -> TaskGrade:
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
            hidden = item["group"].split("::")[0] in hidden_files
            group = groups.setdefault(item["group"], GroupGrade(item["group"], item["points"], hidden))
            group.outcomes[item["nodeid"]] = outcomes.get(item["nodeid"], ("failed", "not run"))
    if not groups:
        return TaskGrade(task, [], f"no test carries the marker {task.marker}")
    return TaskGrade(task, list(groups.values()))


def grade_task(task: Task, student: Path, reference: Path, cases: Path | None, work: Path, *,
               test_timeout: float = TEST_TIMEOUT_S, task_timeout: float = TASK_TIMEOUT_S,
               pytest_args: list[str] | None = None) -> TaskGrade:
    """Grade one task of `student` against the reference's other files and tests (see the module doc)."""
    start = time.perf_counter()
    source = submitted_file(student, task.module)
    if source is None:
        return TaskGrade(task, [], f"the submission has no {task.module}")
    package = work / task.marker
    shutil.copytree(reference / "ladref", package / "ladref", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(source, package / task.module)
    tests = marked_files(reference / "tests", [task.marker])
    hidden = marked_files(reference / "assignments" / "hidden", [task.marker]) if cases else []
    report = work / f"{task.marker}.jsonl"
    cmd = [
        sys.executable, "-m", "pytest", *map(str, tests + hidden), "-c", str(reference / "pyproject.toml"),
        "--rootdir", str(reference), "--confcutdir", str(reference / "tests"), "-o", "pythonpath=", "-o", "addopts=",
        "-p", "no:cacheprovider", "-p", "grading_plugin", "--grading-report", str(report), "-m", task.marker, "-q",
        "--hypothesis-profile=grading", "--test-timeout", str(test_timeout), *(["--hidden-cases", str(cases)] if cases else []),
        *(pytest_args or []),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, [package, HERE, reference / "tests"])), **QUIET_ENV)
    code, output = run_pytest(cmd, work, env, task_timeout)
    records = read_report(report)
    origin = next((r["ladref"] for r in records if "ladref" in r), None)
    if origin is not None and package.resolve() not in Path(origin).resolve().parents:
        raise RuntimeError(f"the tests imported ladref from {origin}, not from the graded package {package}")
    result = task_grade(task, records, {p.name for p in hidden}, None if code is not None else task_timeout)
    if result.error and not records:  # pytest itself failed: show why
        result.error += "\n" + output[-2000:]
    result.error = result.error and result.error.replace(str(package), str(student))
    result.seconds = time.perf_counter() - start
    return result


def grade(student: Path = ROOT, markers: list[str] | None = None, *, reference: Path = ROOT, hidden: bool = True,
          cases: Path | None = None, **options) -> Grade:
    """Grade the tasks `markers` (default: all) of the submission folder `student`.

    Args:
        student: a folder with the task files (``ladref/masks.py`` ..., or the files at its top).
        markers: tasks to grade; None means every task.
        reference: the repository whose ``ladref/``, tests and hidden tests grade it.
        hidden: run the hidden tests when the reference has them.
        cases: hidden cases already recorded (by `record_hidden_cases`); recorded here if None.
        **options: test_timeout, task_timeout (seconds), pytest_args (extra pytest arguments).

    Returns:
        The `Grade`.
    """
    start = time.perf_counter()
    tasks = list(TASKS) if markers is None else [task_by_marker(m) for m in markers]
    student, reference = student.resolve(), reference.resolve()
    if not student.is_dir():
        raise FileNotFoundError(f"no submission folder {student}")
    with tempfile.TemporaryDirectory(prefix="ladref-grade-") as tmp:
        work = Path(tmp)
        if hidden and cases is None:
            cases = record_hidden_cases(reference, work / "hidden_cases.json")
        cases = cases if hidden else None
        graded = [grade_task(task, student, reference, cases, work, **options) for task in tasks]
    return Grade(student, graded, cases is not None, time.perf_counter() - start)


def grade_folder(submissions: Path, out: Path, markers: list[str] | None, *, reference: Path = ROOT, hidden: bool = True,
                 cases: Path | None = None, **options) -> list[Grade]:
    """Grade every sub-folder of `submissions` (hidden cases recorded once, unless given); write
    OUT/<name>/results.json, OUT/<name>/summary.txt and OUT/grades.csv."""
    folders = sorted(p for p in submissions.iterdir() if p.is_dir())
    if not folders:
        raise FileNotFoundError(f"{submissions} holds no submission folders")
    with tempfile.TemporaryDirectory(prefix="ladref-cases-") as tmp:
        if hidden and cases is None:
            cases = record_hidden_cases(reference, Path(tmp) / "cases.json")
        grades = []
        for folder in folders:
            grade_ = grade(folder, markers, reference=reference, cases=cases, hidden=hidden and cases is not None, **options)
            write_results(grade_, out / folder.name / "results.json", out / folder.name / "summary.txt")
            print(f"{folder.name}: {points(grade_.score)} / {grade_.max_score}")
            grades.append(grade_)
    rows = ["submission," + ",".join(t.task.marker for t in grades[0].tasks) + ",total"]
    rows += [f"{g.submission.name}," + ",".join(points(t.score) for t in g.tasks) + f",{points(g.score)}" for g in grades]
    (out / "grades.csv").write_text("\n".join(rows) + "\n")
    return grades


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade ladref submissions task by task (see the module docstring).")
    parser.add_argument("tasks", nargs="*", metavar="TASK", help="task markers to grade (default: all)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--student", type=Path, default=ROOT, help="one submission folder (default: this folder)")
    where.add_argument("--submissions", type=Path, help="a folder of submission folders (needs --out)")
    parser.add_argument("--out", type=Path, help="with --submissions: where results.json, summary.txt and grades.csv go")
    parser.add_argument("--results", type=Path, help="write Gradescope's results.json here")
    parser.add_argument("--summary", type=Path, help="write the plain summary here")
    parser.add_argument("--reference", type=Path, default=ROOT, help="the repository that grades (default: %(default)s)")
    parser.add_argument("--public-only", action="store_true", help="skip the hidden tests")
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT_S, help="seconds per test (default: %(default)s)")
    parser.add_argument("--task-timeout", type=float, default=TASK_TIMEOUT_S, help="seconds per task (default: %(default)s)")
    args, extra = parser.parse_known_args(argv)
    options = dict(reference=args.reference, hidden=not args.public_only, test_timeout=args.test_timeout,
                   task_timeout=args.task_timeout, pytest_args=[a for a in extra if a != "--"])
    markers = args.tasks or None
    if args.submissions is not None:
        if args.out is None:
            parser.error("--submissions needs --out")
        grades = grade_folder(args.submissions, args.out, markers, **options)
        print(f"results in {args.out} (grades.csv, and results.json + summary.txt per submission)")
        return 0 if all(g.score == g.max_score for g in grades) else 1
    result = grade(args.student, markers, **options)
    write_results(result, args.results, args.summary)
    print(summary(result), end="")
    return 0 if result.score == result.max_score else 1


if __name__ == "__main__":
    sys.exit(main())
