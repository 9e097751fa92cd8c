"""Grade ladref submissions task by task: verdicts the submission cannot write, a Gradescope results.json.

    python assignments/autograde.py --student DIR [--results FILE] [--summary FILE] [TASK ...]
    python assignments/autograde.py --submissions DIR --out GRADES      # one sub-folder per student
    python assignments/autograde.py [TASK ...]                          # a student copy: self-check

Grading (the reference repository, with its ``assignments/hidden/`` probes): each task runs in a
process of its own, confined by ``confine.py`` (a time limit, every process it started killed
before the next task, as the unprivileged user "nobody" when the grader is root). That process
holds a fresh package written from the reference read into memory at the start, with the
submission's file for the task (`tasks.Task.module`) copied in, and calls the task's probes
(``hidden/task1_k.py``) on cases drawn in the reference's own run. It sends back the answers
as data; the grader compares them with the reference's answers in its own process. The expected
answers never reach the submission's process, nothing that process writes is a verdict, and
results.json is written by the grader after every process of the submission is gone.

Scoring: a task's points are split over its probe groups by weight; a group earns its share times
the fraction of its cases its judge passes (`answer_diff.JUDGES`): most groups pass an answer equal
to the reference's; the open task's ("modelled_time") passes greedy's tokens fed at a modelled cost
within the case's tolerance of the reference's, and measures the speed-up over greedy, by which
``--submissions`` also ranks the submissions (``leaderboard.csv``). Visible groups draw small cases
anew for every run (``--seed`` fixes them) and are shown at once; hidden groups (deeper, wider
cases) are shown after the due date. A file that does not import, a missing file or a run past
its time scores the task 0 with the reason; a case running past ``--test-timeout`` fails and the
rest of its group is not run; a submission gets ``--budget`` seconds for all its tasks.

Self-check (a student copy, which has no probes, or ``--public-only``): the public tests, run
with pytest (`selfcheck.py`); feedback, never a grade, since the tests share the code's process.

Exit status: 0 when every graded task got full marks, 1 otherwise.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grades import Grade, GroupGrade, TaskGrade  # noqa: E402
from report import leaderboard, points, summary, write_results  # noqa: E402
from selfcheck import check, task_file  # noqa: E402
from tasks import TASKS, Task, answered, answers_file, task_by_marker  # noqa: E402

ROOT = HERE.parent
CASE_TIMEOUT_S = 10.0
TASK_TIMEOUT_S = 120.0
BUDGET_S = 540.0  # per submission: six looping tasks still end well inside Gradescope's limits


def record_expected(snapshot, markers: list[str], seed: int, work: Path, timeout: float = 600.0) -> dict:
    """The reference's cases and answers: {task: {group: {"points", "visible", "judge", "cases", "expected": {id: answer}}}}."""
    from sandbox import run_probes

    recorded = {}
    for marker in markers:
        run = work / f"reference-{marker}"
        snapshot.write(run)
        records, errors, timed_out = run_probes(run, marker, {"seed": seed, "cases": None, "case_timeout": timeout}, timeout, None)
        groups = next((r["groups"] for r in records if "groups" in r), None)
        failed = [r for r in records if "error" in r]
        if groups is None or failed or timed_out:
            raise RuntimeError(f"the reference's own run of the {marker} probes failed: {failed[:1]}\n{errors}")
        for record in records:
            if "got" in record:
                groups[record["group"]].setdefault("expected", {})[record["id"]] = record["got"]
        recorded[marker] = groups
    return recorded


def verdicts(task: Task, groups: dict, records: list[dict], ended: str = "the process ended first") -> list[GroupGrade]:
    """Judge the submission's answers against the reference's, case by case, with each group's judge
    (`answer_diff.JUDGES`, "equal" unless the reference's run recorded another); unanswered cases
    fail, "not run: " + `ended`, or because an earlier case of their group ran past its time."""
    from answer_diff import feedback, judge

    answers = {}
    for record in records:
        key = (record.get("group"), record.get("id"))
        if key not in answers and ("got" in record or "error" in record):
            answers[key] = record
    graded = []
    for name, group in groups.items():
        judged = judge(group.get("judge", "equal"))
        grade = GroupGrade(name, group["points"], not group["visible"], metric=judged.metric)
        unrun = f"not run: {ended}"
        for case in group["cases"]:
            expected, answer, metric = group["expected"][case["id"]], answers.get((name, case["id"])), None
            if answer is None:
                grade.outcomes[case["id"]] = ("failed", feedback(name, case, expected, error=unrun))
            elif "error" in answer:
                grade.outcomes[case["id"]] = ("failed", feedback(name, case, expected, error=str(answer["error"])))
                if "s limit (an endless loop?)" in str(answer["error"]):
                    unrun = "not run: an earlier case of this group ran past the time limit"
            else:
                grade.outcomes[case["id"]], metric = decide(judged, name, case, expected, answer["got"])
            if judged.metric is not None:
                grade.metrics[case["id"]] = metric
        graded.append(grade)
    return graded


def decide(judged, name: str, case: dict, expected, got) -> tuple[tuple[str, str], float | None]:
    """((outcome, message), metric) of one answer: the judge's verdict (an answer it cannot judge fails)."""
    from answer_diff import equal, feedback

    try:
        passed, message, metric = judged.decide(case, expected, got)
    except Exception as exc:  # noqa: BLE001 - an answer shaped unlike the reference's: the judge's checks missed it
        why = f"the answer could not be judged: {type(exc).__name__}: {exc}"
        return ("failed", feedback(name, case, expected, verdict=why)), None
    if passed:
        return ("passed", message), metric
    # "equal" shows expected, got and where they first differ; another judge says why in its own words
    shown = feedback(name, case, expected, got) if judged.decide is equal else feedback(name, case, expected, verdict=message)
    return ("failed", shown), metric


def grade_task(task: Task, student: Path, snapshot, expected: dict, work: Path, *, timeout: float, case_timeout: float,
               sandbox_user: str | None) -> TaskGrade:
    """Grade one task of `student` (see the module docstring)."""
    from sandbox import run_probes

    start = time.perf_counter()
    source = task_file(student, task, snapshot.root)
    if source is None:
        return TaskGrade(task, [], f"the submission has no {task.module} (nor {Path(task.module).name} at its top)")
    run = work / task.marker
    snapshot.write(run, task.module, source)
    groups = expected[task.marker]
    request = {"seed": None, "case_timeout": case_timeout, "cases": {name: g["cases"] for name, g in groups.items()}}
    records, errors, timed_out = run_probes(run, task.marker, request, timeout, sandbox_user)
    seconds = time.perf_counter() - start
    if not any("imported" in r for r in records):
        why = (f"the submitted code did not finish importing within the task's {timeout:g} s" if timed_out
               else "the submitted code does not import:\n" + "\n".join(errors.strip().splitlines()[-8:]))
        return TaskGrade(task, [], why, seconds)
    ended = f"the task's {timeout:g} s were spent" if timed_out else "the process ended first"
    return TaskGrade(task, verdicts(task, groups, records, ended), None, seconds)


def handed_in(student: Path, task: Task) -> bool:
    """Whether the submission answers the task's written questions (``answers/task1_k.md``, not left blank)."""
    for path in (student / answers_file(task), student / Path(answers_file(task)).name, *student.glob(f"*/{answers_file(task)}")):
        if path.is_file() and answered(path.read_text(errors="replace")):
            return True
    return False


def grade_submission(student: Path, tasks: list[Task], snapshot, expected: dict, *, budget: float = BUDGET_S,
                     task_timeout: float = TASK_TIMEOUT_S, case_timeout: float = CASE_TIMEOUT_S,
                     sandbox_user: str | None = None, seed: int | None = None) -> Grade:
    """Grade `tasks` of one submission folder against the recorded `expected` answers."""
    start, before = time.perf_counter(), set(snapshot.changed())
    graded = []
    with tempfile.TemporaryDirectory(prefix="ladref-grade-") as tmp:
        for task in tasks:
            left = budget - (time.perf_counter() - start)
            if left < 5:
                graded.append(TaskGrade(task, [], f"not graded: the submission's {budget:g} s were spent on the tasks before it"))
            else:
                graded.append(grade_task(task, student, snapshot, expected, Path(tmp), timeout=min(task_timeout, left),
                                         case_timeout=case_timeout, sandbox_user=sandbox_user))
            graded[-1].answers = handed_in(student, task)
    result = Grade(student, graded, True, time.perf_counter() - start, seed=seed)
    changed = [rel for rel in snapshot.changed() if rel not in before]
    if changed:  # graded all the same from the copy read at the start; the files are left for you to check
        result.notes.append(f"the reference's files changed while this submission ran (its grade and the next ones use the "
                            f"copy read at the start; check them, e.g. with git diff): {', '.join(changed)}")
    return result


def prepare(reference: Path, markers: list[str] | None, seed: int | None, work: Path):
    """(tasks, snapshot, expected answers, seed): the reference read once and its answers recorded."""
    from sandbox import Snapshot

    tasks = list(TASKS) if markers is None else [task_by_marker(m) for m in markers]
    snapshot = Snapshot.read(reference.resolve())
    missing = [t.marker for t in tasks if t.marker not in snapshot.probe_modules()]
    if missing:
        raise FileNotFoundError(f"no probes for {', '.join(missing)} in {reference}/assignments/hidden/")
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    return tasks, snapshot, record_expected(snapshot, [t.marker for t in tasks], seed, work), seed


def grade(student: Path = ROOT, markers: list[str] | None = None, *, reference: Path = ROOT, hidden: bool = True,
          seed: int | None = None, **options) -> Grade:
    """Grade the tasks `markers` (default: all) of the submission folder `student`.

    Args:
        student: a folder with the task files (``ladref/masks.py`` ..., or the files at its top).
        markers: tasks to grade; None means every task.
        reference: the repository whose files and probes grade it.
        hidden: grade with the probes when the reference has them; False: the public self-check.
        seed: the seed of the visible groups' cases (None: drawn at random).
        **options: for grading, budget, task_timeout, case_timeout (seconds) and sandbox_user;
            for the self-check, test_timeout, task_timeout and pytest_args.

    Returns:
        The `Grade`.
    """
    student = student.resolve()
    if not student.is_dir():
        raise FileNotFoundError(f"no submission folder {student}")
    if not hidden or not (reference / "assignments" / "hidden").is_dir():
        return check(student, list(TASKS) if markers is None else [task_by_marker(m) for m in markers], reference.resolve(), **options)
    with tempfile.TemporaryDirectory(prefix="ladref-reference-") as tmp:
        tasks, snapshot, expected, seed = prepare(reference, markers, seed, Path(tmp))
    return grade_submission(student, tasks, snapshot, expected, seed=seed, **options)


def grade_folder(submissions: Path, out: Path, markers: list[str] | None, *, reference: Path = ROOT, seed: int | None = None,
                 **options) -> list[Grade]:
    """Grade every sub-folder of `submissions` (the reference's answers recorded once); write
    OUT/<name>/results.json, OUT/<name>/summary.txt and OUT/grades.csv, and for tasks whose judges
    measure (the open task's speed-up), OUT/leaderboard.csv with the ranking printed (`report.leaderboard`)."""
    folders = sorted(p for p in submissions.iterdir() if p.is_dir()) if submissions.is_dir() else []
    if not folders:
        raise FileNotFoundError(f"{submissions} holds no submission folders")
    with tempfile.TemporaryDirectory(prefix="ladref-reference-") as tmp:
        tasks, snapshot, expected, seed = prepare(reference, markers, seed, Path(tmp))
    grades = []
    for folder in folders:
        result = grade_submission(folder, tasks, snapshot, expected, seed=seed, **options)
        write_results(result, out / folder.name / "results.json", out / folder.name / "summary.txt")
        print(f"{folder.name}: {points(result.score)} / {result.max_score}" + "".join(f"\n  note: {n}" for n in result.notes))
        grades.append(result)
    rows = ["submission," + ",".join(t.marker for t in tasks) + ",total"]
    rows += [f"{g.submission.name}," + ",".join(points(t.score) for t in g.tasks) + f",{points(g.score)}" for g in grades]
    (out / "grades.csv").write_text("\n".join(rows) + "\n")
    ranking = leaderboard(grades)
    if ranking:
        (out / "leaderboard.csv").write_text(ranking[0])
        print(ranking[1], end="")
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
    parser.add_argument("--public-only", action="store_true", help="the self-check: public tests only, no probes")
    parser.add_argument("--seed", type=int, help="seed of the visible groups' cases (default: a new one per run)")
    parser.add_argument("--test-timeout", type=float, help=f"seconds per case (default {CASE_TIMEOUT_S:g}; self-check: per test, 60)")
    parser.add_argument("--task-timeout", type=float, default=TASK_TIMEOUT_S, help="seconds per task (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds per submission (default: %(default)s)")
    parser.add_argument("--sandbox-user", default=None, help="run submitted code as this user (default: nobody when root)")
    args, extra = parser.parse_known_args(argv)
    # stopped from outside (a whole-run limit): unwind, so that the temporary folders holding the
    # reference's answers are removed and the confined processes are killed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    hidden = not args.public_only and (args.reference / "assignments" / "hidden").is_dir()
    if hidden:
        from sandbox import default_sandbox_user

        options = dict(budget=args.budget, task_timeout=args.task_timeout, case_timeout=args.test_timeout or CASE_TIMEOUT_S,
                       sandbox_user=args.sandbox_user or default_sandbox_user(), seed=args.seed)
    else:
        options = dict(task_timeout=args.task_timeout, test_timeout=args.test_timeout or 60.0, pytest_args=[a for a in extra if a != "--"])
    markers = args.tasks or None
    if args.submissions is not None:
        if args.out is None:
            parser.error("--submissions needs --out")
        grades = grade_folder(args.submissions, args.out, markers, reference=args.reference, **options) if hidden else None
        if grades is None:
            parser.error("--submissions needs the reference's probes (assignments/hidden/)")
        print(f"results in {args.out} (grades.csv, and results.json + summary.txt per submission)")
        return 0 if all(g.score == g.max_score for g in grades) else 1
    result = grade(args.student, markers, reference=args.reference, hidden=hidden, **options)
    write_results(result, args.results, args.summary)
    print(summary(result), end="")
    return 0 if result.score == result.max_score else 1


if __name__ == "__main__":
    sys.exit(main())
