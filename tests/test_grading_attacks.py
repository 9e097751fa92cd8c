"""The autograder cannot be gamed: submissions that attack the grader score what their functions earn.

Every attacking submission below leaves task 1.2's functions unimplemented (the student copy's
stubs) and adds code that runs when the module is imported: it forges the report and
results.json, patches the worker that calls it, starts a detached process that rewrites
results.json after the grader has finished, looks for the expected answers on disk, or edits the
reference it is graded with. Each must score 0, exactly like the untouched stubs; a correct
submission must still score full marks beside them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from kit import load, reference_answers

ROOT = Path(__file__).resolve().parents[1]
autograde, make_student, report, tasks_mod, sandbox = map(load, ("autograde", "make_student", "report", "tasks", "sandbox"))

TASK = tasks_mod.task_by_marker("task1_2")
pytestmark = pytest.mark.slow

FORGE = '''
import atexit, json, os
def _forge():
    for name in os.listdir("/proc/self/fd"):  # every file this process holds open: the report among them
        try:
            path = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if path.endswith((".jsonl", ".json")):
            with open(path, "a") as out:
                out.write(json.dumps({"outcome": "passed", "score": 100}) + "\\n")
    request = json.load(open("../request.json")) if os.path.exists("../request.json") else {}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    json.dump({"score": 100, "tests": []}, open(RESULTS, "w"))
atexit.register(_forge)
'''

PATCH_WORKER = '''
import json, sys
main = sys.modules["__main__"]
if hasattr(main, "observe"):
    def observe(report, module, group, cases, timeout):  # answer with whatever the case says is expected
        for case in cases:
            got = case.get("expected", case.get("answer"))
            report.write(json.dumps({"group": group, "id": case["id"], "got": got}) + "\\n")
    main.observe = observe
'''

DAEMON = '''
import json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # detached: no parent, its own session
        time.sleep(4)
        json.dump({"score": 100, "tests": []}, open(RESULTS, "w"))
        open(RESULTS + ".late", "w").write("still alive")
        os._exit(0)
    os._exit(0)
'''

READ_EXPECTED = '''
import glob, os, tempfile
found = []
for top in {roots!r} + glob.glob(os.path.join(tempfile.gettempdir(), "ladref-*")):
    for folder, _, files in os.walk(top):
        for name in files:
            try:
                text = open(os.path.join(folder, name), errors="replace").read()
            except OSError:
                continue
            # answers are objects ("groups": an object); a word in a vocabulary (a tokenizer.json) is not; the
            # public cases' answers (tests/data/, shipped to students: fixed cases, never the graded ones) are not either
            public = os.path.basename(folder) == "data" and name in {public!r}
            if ('"expected": {{' in text or '"groups": {{' in text) and name.endswith((".json", ".jsonl")) and not public:
                found.append(os.path.join(folder, name))
if found:
    open(MARKER, "w").write("\\n".join(found))
'''

TAMPER = '''
import os
probe = os.path.join(REFERENCE, "assignments", "hidden", "task1_2.py")
text = open(probe).read()
open(probe, "w").write(text + "\\n\\nGROUPS = {name: Group(lambda case: None, group.points, group.visible) for name, group in GROUPS.items()}\\n")
os.remove(os.path.join(REFERENCE, "tests", "test_tree.py"))
'''


def stubs() -> str:
    return make_student.stub_source((ROOT / TASK.module).read_text(), TASK.marker, TASK.functions)


def submit(folder: Path, text: str) -> Path:
    (folder / TASK.module).parent.mkdir(parents=True)
    (folder / TASK.module).write_text(text)
    return folder


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """A copy of the repository's grading files: an attack may edit it, never the real one."""
    copy = tmp_path_factory.mktemp("reference")
    for name in ("ladref", "assignments", "tests"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    return copy


@pytest.fixture(scope="module")
def prepared(reference):
    """The reference read and its answers recorded once (task 1.2, seed 0), in a folder removed
    before any submission runs, as `autograde.grade` does."""
    with tempfile.TemporaryDirectory(prefix="ladref-reference-") as tmp:
        return autograde.prepare(reference, [TASK.marker], 0, Path(tmp))


def graded(folder: Path, prepared, results: Path | None = None, **options):
    tasks, snapshot, expected, seed = prepared
    grade = autograde.grade_submission(folder, tasks, snapshot, expected, seed=seed,
                                       sandbox_user=sandbox.default_sandbox_user(), **options)
    report.write_results(grade, results, None)
    return grade


def test_correct_and_stub_submissions_score_what_their_functions_earn(tmp_path, prepared):
    assert graded(submit(tmp_path / "right", (ROOT / TASK.module).read_text()), prepared).score == TASK.points
    assert graded(submit(tmp_path / "stubs", stubs()), prepared).score == 0


def test_a_forged_report_and_results_json_change_nothing(tmp_path, prepared):
    results = tmp_path / "results" / "results.json"
    grade = graded(submit(tmp_path / "forger", stubs() + f"RESULTS = {str(results)!r}\n" + FORGE), prepared, results)
    assert grade.score == 0
    assert json.loads(results.read_text())["score"] == 0  # written by the grader, after the submission's processes


def test_patching_the_worker_that_calls_the_code_earns_nothing(tmp_path, prepared):
    grade = graded(submit(tmp_path / "patcher", stubs() + PATCH_WORKER), prepared)
    assert grade.score == 0
    assert all("expected" not in case for group in prepared[2][TASK.marker].values() for case in group["cases"])


def test_a_detached_child_is_killed_before_the_grader_writes_results(tmp_path, prepared):
    results = tmp_path / "results" / "results.json"
    start = time.perf_counter()
    grade = graded(submit(tmp_path / "daemon", stubs() + f"RESULTS = {str(results)!r}\n" + DAEMON), prepared, results)
    assert grade.score == 0
    time.sleep(max(0.0, 6 - (time.perf_counter() - start)))  # past the child's 4 s: it would have written by now
    assert json.loads(results.read_text())["score"] == 0 and not Path(str(results) + ".late").exists()


def test_no_file_the_submission_can_read_holds_the_expected_answers(tmp_path, tmp_path_factory, prepared, reference):
    marker = tmp_path / "found.txt"
    roots = [str(reference), str(tmp_path_factory.getbasetemp())]
    public = sorted(p.name for p in make_student.public_data(ROOT / "tests", make_student.public_tests(ROOT / "tests")))
    code = stubs() + f"MARKER = {str(marker)!r}\n" + READ_EXPECTED.format(roots=roots, public=public)
    assert graded(submit(tmp_path / "reader", code), prepared).score == 0
    assert not marker.exists(), marker.read_text() if marker.exists() else ""


def test_edits_to_the_reference_reach_no_grade_and_are_reported(tmp_path, prepared, reference):
    probe, public = reference / "assignments" / "hidden" / "task1_2.py", reference / "tests" / "test_tree.py"
    before = probe.read_bytes(), public.read_bytes()
    vandal = graded(submit(tmp_path / "vandal", stubs() + f"REFERENCE = {str(reference)!r}\n" + TAMPER), prepared)
    assert vandal.score == 0
    if sandbox.default_sandbox_user() is None:  # the edits were made (as "nobody" they are refused): the grader says so
        assert any("changed while this submission ran" in n and "tests/test_tree.py" in n for n in vandal.notes), vandal.notes
    else:
        assert (probe.read_bytes(), public.read_bytes()) == before and not vandal.notes
    assert graded(submit(tmp_path / "next", stubs()), prepared).score == 0  # graded from the copy read at the start
    assert not graded(submit(tmp_path / "after", stubs()), prepared).notes  # reported once, for the submission that did it
    probe.write_bytes(before[0])
    public.write_bytes(before[1])


def test_an_import_that_hangs_scores_zero_with_the_reason_in_time(tmp_path, prepared):
    start = time.perf_counter()
    grade = graded(submit(tmp_path / "hang", "import time\nwhile True:\n    time.sleep(1)\n"), prepared, task_timeout=6)
    assert time.perf_counter() - start < 30 and grade.score == 0
    assert "did not finish importing within the task's 6 s" in grade.tasks[0].error


def test_a_submission_without_the_task_file_scores_zero_with_the_reason(tmp_path, prepared):
    (tmp_path / "empty").mkdir()
    grade = graded(tmp_path / "empty", prepared)
    assert grade.score == 0 and "has no ladref/sources/ngram_pool.py" in grade.tasks[0].error


def test_a_submission_looping_in_every_task_ends_within_its_limits(tmp_path):
    folder = tmp_path / "loops"
    for task in tasks_mod.TASKS:
        text = make_student.stub_source((ROOT / task.reference_file).read_text(), task.marker, task.functions)
        looping = [f"{indent}while True:\n{indent}    pass" if line.lstrip().startswith("raise NotImplementedError") else line
                   for line in text.splitlines() for indent in [line[: len(line) - len(line.lstrip())]]]
        (folder / task.module).parent.mkdir(parents=True, exist_ok=True)
        (folder / task.module).write_text("\n".join(looping) + "\n")
    tasks, snapshot, expected, seed = reference_answers()
    start = time.perf_counter()
    grade = autograde.grade_submission(folder, tasks, snapshot, expected, seed=seed, case_timeout=1, task_timeout=60)
    groups = sum(len(t.groups) for t in grade.tasks)
    assert grade.score == 0 and all(t.error is None for t in grade.tasks), report.summary(grade)
    # each group stops at its first case (1 s); the rest is starting each task's process, which imports
    # torch and, for some probes, transformers (about 2-6 s on a 2-core machine, more when it is busy):
    # a grader that let a case run to its task's 60 s limit would take 60 s more per task
    assert time.perf_counter() - start < 60 + 3 * groups + 10 * len(grade.tasks), time.perf_counter() - start
    assert all("ran past the 1 s limit" in g.failures[0][1] for t in grade.tasks for g in t.groups)
