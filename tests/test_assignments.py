"""The course kit (assignments/): the task table, the student copy, the handouts and the autograder.

The slow tests are the kit's acceptance targets: in a fresh student copy every documented command
works and untouched stubs score 0 with every task's failures listed; the reference scores full
marks (public and hidden tests); a syntax error and an endless loop each score 0 for their task
within the time limits, without touching the other tasks' scores.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from kit import load, reference_answers

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"


tasks_mod = load("tasks")
make_student = load("make_student")
autograde = load("autograde")
selfcheck = load("selfcheck")
handouts = load("handouts")
report = load("report")
overview = load("overview")
ALL = [t.marker for t in tasks_mod.TASKS]


def functions_by_name(path: Path) -> dict[str, ast.FunctionDef]:
    """Qualified name -> function node, for top-level functions and methods."""
    tree, found = ast.parse(path.read_text()), {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            found.update({f"{node.name}.{f.name}": f for f in node.body if isinstance(f, ast.FunctionDef)})
    return found


def numbered_steps(path: Path, func: ast.FunctionDef) -> list[str]:
    """The step numbers of the `# 1. ...` comments (or `# TODO 1. ...`) inside a function."""
    lines = path.read_text().splitlines()[func.lineno - 1 : func.end_lineno]
    return re.findall(r"^\s*# (?:TODO )?(\d+)\. ", "\n".join(lines), flags=re.M)


def test_task_table_is_complete():
    config = (ROOT / "pyproject.toml").read_text()
    tutorials = {p.stem for p in (ROOT / "tutorials").glob("[0-9][0-9]_*.py")}
    # a solution tutorial is an existing one, or the next one, being written (its number one past
    # the last): once a tutorial carries that number, the table must name it exactly
    upcoming = f"{max(int(t[:2]) for t in tutorials) + 1:02d}_"
    for task in tasks_mod.TASKS:
        assert f'"{task.marker}:' in config, f"{task.marker} is not registered in pyproject.toml"
        assert (ROOT / task.reference_file).is_file()
        if task.reference:  # a course answer the library does not hold: neither the wheel nor the API pages ship it
            assert task.reference.startswith("assignments/") and not (ROOT / task.module).exists(), task.marker
        assert tasks_mod.marked_files(ROOT / "tests", [task.marker]), f"no public test carries {task.marker}"
        assert (ASSIGNMENTS / "hidden" / f"{task.marker}.py").is_file(), f"{task.marker} has no probes in assignments/hidden/"
        for name in task.solution_tutorials:
            assert name in tutorials or name.startswith(upcoming), f"{task.marker}: no tutorial {name}"
        handouts.prose(task)  # the handout text exists, with the required sections
    assert {p.stem for p in (ASSIGNMENTS / "handouts").glob("*.md")} == set(ALL), "a handout without a task"
    assignments = overview.by_assignment()
    assert list(assignments) == ["1", "2"] and all(sum(t.points for t in ts) == 100 for ts in assignments.values())
    order = [t.marker for t in tasks_mod.work_order()]  # every task after the tasks it requires
    assert sorted(order) == sorted(ALL)
    assert all(order.index(r) < order.index(t.marker) for t in tasks_mod.TASKS for r in t.requires)


def test_step_comments_become_todos():
    source = (
        "def f(x):\n    \"\"\"Doc.\"\"\"\n    # 1. First: a long step\n    #    continued here.\n    y = x  # 2. not a whole-line comment\n"
        "    # a plain comment\n    # 2. Second.\n    return y\n"
    )
    stub = make_student.stub_source(source, "task9", ("f",))
    assert "    # TODO 1. First: a long step\n    #    continued here.\n    # TODO 2. Second.\n    raise NotImplementedError" in stub
    assert "plain comment" not in stub and "y = x" not in stub


def test_student_version_keeps_signatures_docstrings_and_steps(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out)
    copies = {}  # module -> the library functions doing a task's job that this copy stubs with it
    for _, module, functions in load("copy_plan").plan().library_stubs():
        copies[module] = copies.get(module, ()) + functions
    assert "ladref/batched/static.py" in copies and "ladref/minimal.py" not in copies  # task 2.2's loop calls its helpers
    for task in tasks_mod.TASKS:
        ref, stu = functions_by_name(ROOT / task.reference_file), functions_by_name(out / task.module)
        assert ref.keys() == stu.keys()
        for name, ref_fn in ref.items():
            stu_fn = stu[name]
            assert ast.dump(ref_fn.args) == ast.dump(stu_fn.args) and ast.get_docstring(ref_fn) == ast.get_docstring(stu_fn)
            if name in task.functions:
                raised = ast.unparse(stu_fn.body[-1])
                assert len(stu_fn.body) == 2 and raised.startswith("raise NotImplementedError") and task.marker in raised
                assert numbered_steps(out / task.module, stu_fn) == numbered_steps(ROOT / task.reference_file, ref_fn)
            elif name not in copies.get(task.module, ()):
                assert ast.dump(ref_fn) == ast.dump(stu_fn), f"{name} should be untouched"
    assert numbered_steps(out / "ladref/step.py", functions_by_name(out / "ladref/step.py")["draft_step"]) == list("2345")
    for module, functions in copies.items():  # a library function doing a task's job: stubbed, the rest untouched
        ref, stu = functions_by_name(ROOT / module), functions_by_name(out / module)
        task_functions = {f for t in tasks_mod.TASKS if t.module == module for f in t.functions}
        assert ref.keys() == stu.keys() and set(functions) <= set(ref)
        for name, ref_fn in ref.items():
            stu_fn = stu[name]
            assert (ast.dump(ref_fn) == ast.dump(stu_fn)) == (name not in {*functions, *task_functions}), name
            assert ast.get_docstring(ref_fn) == ast.get_docstring(stu_fn)
            if name in functions:
                assert ast.unparse(stu_fn.body[-1]).startswith("raise NotImplementedError") and len(stu_fn.body) == 2
    stubbed = {t.module for t in tasks_mod.TASKS} | set(copies)
    for path in (ROOT / "ladref").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in stubbed:
            assert (out / rel).read_text() == path.read_text(), f"{rel} should be copied verbatim"


def test_student_copy_ships_only_what_it_can_run(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out)
    shipped = {p.name for p in (out / "tests").iterdir()}
    task_tests = {p.name for p in tasks_mod.marked_files(ROOT / "tests", ALL)}
    assert shipped == task_tests | {"conftest.py", "strategies.py", "families.py", "data"}
    # read by test_lookahead.py and test_minimal.py; not the script that records the latter (assignments/public_cases.py)
    assert sorted(p.name for p in (out / "tests" / "data").iterdir()) == ["lookahead_v0_2.json", "minimal_cases.json"]
    assert not {"test_peer_lade.py", "test_oracles.py", "test_docs.py", "test_assignments.py"} & shipped
    for path in (out / "tests").glob("test_*.py"):  # no naive model of a task function in a shipped test
        assert not re.search(r"def naive_|OrderedDict|cumprod|children\.get\(|\.children\[", path.read_text()), path.name
    assert not (out / "assignments" / "hidden").exists() and not (out / "assignments" / "make_student.py").exists()
    assert 'pythonpath = ["."]' in (out / "pyproject.toml").read_text()
    assert {"README.md", "conftest.py", "constraints.txt"} <= {p.name for p in out.iterdir()}
    assert sorted(p.name for p in (out / "handouts").iterdir()) == [f"{m}.md" for m in ALL]


def test_generator_releases_only_the_chosen_task_and_stubs_the_rest(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out, ["task1_3"])
    assert "task1_1: implement to_additive" in (out / "ladref" / "masks.py").read_text()  # not released: still a stub
    assert "task1_3: implement verify_greedy" in (out / "ladref" / "verify.py").read_text()
    assert [p.name for p in (out / "handouts").iterdir()] == ["task1_3.md"]
    assert [p.name for p in (out / "tests").glob("test_*.py")] == ["test_verify.py"]
    with pytest.raises(ValueError, match="unknown task"):
        make_student.make_student(tmp_path / "other", ["task9"])


def test_handouts_say_everything_a_student_needs():
    for task in tasks_mod.TASKS:
        text = handouts.render_handout(task)
        for heading in ("## Goal", "## The rule", "## Specification", "## Hints", "## Check your work",
                        "## Grading", "## Written questions", "## Submit"):
            assert heading in text, f"{task.marker}: {heading}"
        assert f"{task.points} of 100 (assignment {overview.assignment_of(task)}'s autograder)" in text and f"about {task.hours} hours" in text and task.module in text
        assert all(f"`{name}`" in text for name in task.functions)
        assert all(command in text for command, _ in handouts.student_commands(task))
        questions = text.split("## Written questions")[1].split("## Submit")[0]
        assert re.findall(r"^\d\. ", questions, flags=re.M) == ["1. ", "2. "]
        assert "`test_" in text.split("## Specification")[1]  # the public tests, listed
    step = handouts.render_handout(tasks_mod.task_by_marker("task1_4")).split("## Hints")[0]
    for rule in ("last_row_index()", "tree_index()", "is_causal", "window.advance", "runner.commit(past, keep)", "topk"):
        assert rule in step, f"the step's handout does not state its rule on {rule}"  # what the hidden tests rely on
    notes = {line.split(" | ")[0].strip("| "): line for line in handouts.instructor_notes().splitlines() if line.startswith("| `")}
    for task in tasks_mod.TASKS:  # each tutorial's row names every task whose solution it shows
        assert all(f"{task.number} {task.title}" in notes[f"`tutorials/{name}.py`"] for name in task.solution_tutorials)


def test_self_check_scores_killed_runs_and_import_errors_zero_with_the_reason():
    start = time.perf_counter()
    code, _ = selfcheck.run_pytest([sys.executable, "-c", "import time; time.sleep(60)"], ROOT, dict(os.environ), 1.0)
    assert code is None and time.perf_counter() - start < 30
    task = tasks_mod.TASKS[0]
    killed = selfcheck.task_grade(task, [{"ladref": "x"}], 5.0)
    assert killed.score == 0 and "5 s limit" in killed.error
    broken = selfcheck.task_grade(task, [{"collect_error": "test_masks.py", "message": "E   SyntaxError: invalid syntax"}], None)
    assert broken.score == 0 and "SyntaxError" in broken.error
    collected = [{"nodeid": f"test_x.py::test_a[{i}]", "group": "test_x.py::test_a", "tasks": [task.marker], "points": 1} for i in range(2)]
    records = [{"collected": collected + [{"nodeid": "test_x.py::test_b", "group": "test_x.py::test_b", "tasks": [task.marker],
                                           "points": 2}]},
               {"started": "test_x.py::test_a[0]"}, {"nodeid": "test_x.py::test_a[0]", "outcome": "passed"},
               {"started": "test_x.py::test_a[1]"}]
    partial = selfcheck.task_grade(task, records, 9.0)  # killed in test_a[1]: half of a 1-point group of 3
    assert partial.score == Fraction(task.points, 6) and "9 s limit" in partial.groups[0].outcomes["test_x.py::test_a[1]"][1]


# --- the acceptance targets (slow: each task is graded in processes of its own) ---


def check_gradescope(results: dict, grade) -> None:
    """results.json follows Gradescope's layout and adds up."""
    assert set(results) >= {"score", "tests", "output", "visibility"} and results["score"] == round(float(grade.score), 2)
    assert abs(sum(t["max_score"] for t in results["tests"]) - grade.max_score) < 0.05
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "output", "visibility", "status"}
        assert test["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
        assert 0 <= test["score"] <= test["max_score"]
    json.dumps(results)


@pytest.mark.slow
def test_reference_scores_full_marks():
    tasks, snapshot, expected, seed = reference_answers()
    grade = autograde.grade_submission(ROOT, tasks, snapshot, expected, seed=seed)
    assert grade.hidden and grade.score == grade.max_score == sum(t.points for t in tasks_mod.TASKS), report.summary(grade)
    results = report.gradescope(grade)
    check_gradescope(results, grade)
    assert all(t["status"] == "passed" for t in results["tests"])
    assert {t["visibility"] for t in results["tests"]} == {"visible", "after_due_date"}  # every task has both kinds
    assert {t["tags"][0] for t in results["tests"] if t["visibility"] == "visible"} == set(ALL)


def broken_submission(folder: Path, change: str) -> Path:
    """A copy of the reference's ladref/ whose verify_greedy starts with `change`."""
    shutil.copytree(ROOT / "ladref", folder / "ladref", ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "ladref" / "verify.py"
    text = path.read_text()
    anchor = "    tokens, preds = tree.tokens.tolist(), node_preds.tolist()\n"
    assert anchor in text
    path.write_text(text.replace(anchor, change + anchor, 1))
    return folder


@pytest.mark.slow
def test_syntax_error_and_endless_loop_score_their_task_zero(tmp_path):
    submissions = tmp_path / "submissions"
    broken_submission(submissions / "alice", "    if tree = 0:\n        pass\n")  # a SyntaxError
    broken_submission(submissions / "bob", "    while True:\n        pass\n")  # never returns
    out = tmp_path / "grades"
    start = time.perf_counter()
    grades = autograde.grade_folder(submissions, out, ["task1_2", "task1_3"], seed=0, case_timeout=1, task_timeout=60)
    assert time.perf_counter() - start < 120
    alice_, bob_ = ({t.task.marker: t for t in g.tasks} for g in grades)
    assert alice_["task1_2"].score == bob_["task1_2"].score == 15  # the other task is unaffected
    assert alice_["task1_3"].score == 0 and "SyntaxError" in alice_["task1_3"].error
    # bob's verify_greedy never returns: its groups score 0; verify_chosen, untouched, keeps its share
    loops = [g for g in bob_["task1_3"].groups if g.name.startswith("verify_greedy")]
    assert loops and all(g.fraction == 0 for g in loops)
    assert bob_["task1_3"].score == sum(bob_["task1_3"].group_points(g)[1] for g in bob_["task1_3"].groups if g not in loops)
    alice = json.loads((out / "alice" / "results.json").read_text())
    assert alice["extra_data"]["tasks"] == {"task1_2": 15, "task1_3": 0} and "SyntaxError" in alice["output"]
    bob = json.loads((out / "bob" / "results.json").read_text())
    assert "ran past the 1 s limit" in bob["output"]  # a visible group: its first failing call is shown at once
    late = [t for t in bob["tests"] if "hidden: verify_greedy" in t["name"]]
    assert late and all(t["score"] == 0 and t["visibility"] == "after_due_date" and "ran past the 1 s limit" in t["output"] for t in late)
    assert "verify_greedy, case" not in bob["output"]  # hidden failures stay out of what students see at once
    csv = (out / "grades.csv").read_text().splitlines()
    assert csv[:2] == ["submission,task1_2,task1_3,total", "alice,15,0,15"] and csv[2].startswith("bob,15,5.62")


# plausible wrong versions of task 1.6 (a batch's KV cache): a line of the reference's ladref/batched/cache.py, its
# wrong version, and the groups that must catch it
PLAN = "    return torch.where(k < counts[:, None], frontier + entries, targets), targets\n"
WRONG_CACHES = {
    "moves the leftovers past a count": (PLAN, "    return frontier + entries, targets\n",
                                         ("plan", "commit on a labelled cache")),
    "forgets the frontier": (PLAN, "    return torch.where(k < counts[:, None], entries, targets), targets\n",
                             ("plan", "commit on a labelled cache", "a batch driven by hand")),
    "loops over rows": (PLAN, "    return torch.stack([torch.where(k < counts[b], frontier + entries[b], targets[b]) "
                              "for b in range(entries.shape[0])]), targets\n",
                        ("a tensor program: no read back, no loop over rows",)),
    "marks the whole step": ("torch.arange(k, device=counts.device) < counts[:, None], 0)",
                             "torch.arange(k, device=counts.device) < counts[:, None] + k, 0)",
                             ("commit on a labelled cache", "a batch driven by hand")),
    "lets rows see the holes": ("self.bias[:, None, :t].expand(rows, q, t)",
                                "torch.zeros_like(self.bias[:, None, :t]).expand(rows, q, t)", ("a batch driven by hand",)),
    "marks a one-token step's slot after the pass": ("            self.bias[:, t] = 0\n", "            pass\n",
                                                      ("a batch driven by hand",)),
}


@pytest.mark.slow
def test_wrong_batch_caches_lose_points(tmp_path):
    submissions = tmp_path / "submissions"
    reference = (ROOT / "ladref" / "batched" / "cache.py").read_text()
    folder = {name: name.replace(" ", "_").replace("'", "") for name in ["right", *WRONG_CACHES]}
    for name, (right, wrong, _) in {"right": ("", "", ()), **WRONG_CACHES}.items():
        assert reference.count(right) == 1 or not right, f"{name}: the reference's ladref/batched/cache.py changed"
        path = submissions / folder[name] / "ladref" / "batched" / "cache.py"
        path.parent.mkdir(parents=True)
        path.write_text(reference.replace(right, wrong, 1) if right else reference)
    grades = {g.submission.name: g.tasks[0] for g in autograde.grade_folder(submissions, tmp_path / "grades", ["task1_6"], seed=0)}
    assert grades["right"].score == 10
    for name, (_, _, caught_by) in WRONG_CACHES.items():
        graded = grades[folder[name]]
        by_group = {g.name: g.fraction for g in graded.groups}
        assert graded.score < 10 and all(by_group[group] < 1 for group in caught_by), (name, by_group)
        if {"plan", "a batch driven by hand"} <= set(caught_by):  # wrong moves, wrong caches
            assert graded.score < 5, f"{name} scores {graded.score}"


def run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | env
    return subprocess.run(cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600)


def shell(command: str) -> list[str]:
    """A documented `python ...` command as an argument list for this interpreter."""
    args = command.replace('"', "").split()
    assert args[0] == "python", command
    return [sys.executable, *args[1:]]


@pytest.mark.slow
def test_documented_student_commands_work_in_a_fresh_copy(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out)
    readme = (out / "README.md").read_text()
    (install, _), *commands = handouts.student_commands()
    assert all(c in readme for c, _ in handouts.student_commands())
    dry = run([*shell(install), "--dry-run", "--no-deps", "--no-build-isolation", "--no-index"], out)
    assert dry.returncode == 0, dry.stdout + dry.stderr  # the copy installs (README.md, pyproject.toml, constraints)
    # every command runs the copy's tests on its stubs: failures, never a collection error
    outputs = {}
    for command, _ in commands + handouts.student_commands(tasks_mod.task_by_marker("task1_3")):
        proc = outputs[command] = run(shell(command), out)
        assert proc.returncode == 1, f"{command}\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        assert "NotImplementedError" in proc.stdout and "error" not in proc.stdout.splitlines()[-1], command
    # the self-check: untouched stubs score 0, with every task's failing tests listed
    graded = outputs["python assignments/autograde.py"].stdout
    assert "public tests only" in graded and graded.splitlines()[-1] == f"score: 0 / {sum(t.points for t in tasks_mod.TASKS)}"
    for task in tasks_mod.TASKS:
        assert re.search(rf"task {re.escape(task.number)} .* 0 / {task.points} ", graded), task.marker
        for name, _ in handouts.public_checks(task, ROOT / "tests"):
            assert name in graded, f"{name} is not listed"
    # an installed reference first on the path does not change what is tested ...
    proc = run([sys.executable, "-m", "pytest", "tests/test_verify.py"], out, PYTHONPATH=str(ROOT))
    assert proc.returncode == 1 and " failed" in proc.stdout and " passed" not in proc.stdout.splitlines()[-1]
    # ... and where nothing pins the copy (no pythonpath, an import mode that leaves sys.path alone),
    # conftest.py stops the run instead of testing the reference
    proc = run([sys.executable, "-m", "pytest", str(out / "tests" / "test_verify.py"), "-o", "pythonpath=",
                "--import-mode=importlib"], tmp_path, PYTHONPATH=str(ROOT))
    assert proc.returncode == 4 and "would import ladref from" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_solved_copy_passes_the_documented_commands(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out, ["task1_3"], solved=[m for m in ALL if m != "task1_3"])
    shutil.copy2(ROOT / "ladref" / "verify.py", out / "ladref" / "verify.py")  # the task done: the reference's code
    for command, _ in handouts.student_commands(tasks_mod.task_by_marker("task1_3"))[1:]:  # -x adds nothing when all pass
        proc = run(shell(command), out)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}"
    assert "15 / 15" in proc.stdout and "public tests only" in proc.stdout
