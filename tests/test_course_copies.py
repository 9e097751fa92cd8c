"""A copy per assignment that an instructor hands out as is: no solution in it (no graded function's
reference, near copies included, and no library function doing a task's job), the other assignment's
tasks stubs and not released, solved tasks only on request, assignment 2's reading complete; and one
Gradescope zip per assignment whose budget grades every task."""

from __future__ import annotations

import ast
import runpy
import zipfile
from pathlib import Path

import pytest
from kit import load

ROOT = Path(__file__).resolve().parents[1]
tasks_mod, make_student, near_copies, copy_plan, make_gradescope, handouts = map(
    load, ("tasks", "make_student", "near_copies", "copy_plan", "make_gradescope", "handouts"))
A1 = [t.marker for t in tasks_mod.tasks_of(1)]
A2 = [t.marker for t in tasks_mod.tasks_of(2)]


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    """Assignment 1's copy, assignment 2's, and assignment 2's with assignment 1 shipped solved."""
    base = tmp_path_factory.mktemp("copies")
    make_student.make_student(base / "a1", assignment=1)
    make_student.make_student(base / "a2", assignment=2)
    make_student.make_student(base / "a2s", assignment=2, solved=["1"])
    return {"a1": base / "a1", "a2": base / "a2", "a2s": base / "a2s"}


def function_source(path: Path, qualname: str) -> str:
    """The text of one function or method of a file, as `ast` unparses it."""
    return ast.unparse(dict(near_copies.functions(path))[qualname])


# --- rule 3: no solution in a copy ---


@pytest.mark.parametrize("name, solved", [("a1", ()), ("a2", ("1",)), ("a2s", ("1",))])  # 1: over by assignment 2
def test_no_copy_holds_a_near_copy_of_a_graded_function(copies, name, solved):
    hits = near_copies.find_near_copies(copies[name], solved)
    assert not hits, "\n".join(map(str, hits))


def test_the_checker_flags_a_planted_near_copy_and_not_an_unrelated_function(tmp_path):
    source = function_source(ROOT / "ladref" / "accept.py", "accept_one")
    tree = ast.parse(source)
    func = tree.body[0]
    func.name, func.body = "my_rule", func.body[1:]  # another name, no docstring
    for node in ast.walk(func):  # every local renamed
        if isinstance(node, ast.Name) and node.id in near_copies.bound_names(func):
            node.id = node.id + "_x"
        elif isinstance(node, ast.arg):
            node.arg = node.arg + "_x"
    changed = next(n for n in ast.walk(func) if isinstance(n, ast.Compare))  # one expression changed
    changed.ops = [ast.LtE() if isinstance(changed.ops[0], ast.Lt) else ast.Lt()]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_planted.py").write_text(ast.unparse(tree) + "\n\n\n" + function_source(
        ROOT / "assignments" / "handouts.py", "render_handout").replace("def render_handout", "def unrelated", 1) + "\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n```python\n" + ast.unparse(func.body) + "\n```\n")
    found = {hit.found: hit for hit in near_copies.find_near_copies(tmp_path)}
    assert set(found) == {"tests/test_planted.py:my_rule", "docs/page.md:block 1"}, found
    assert found["tests/test_planted.py:my_rule"].graded == "task2_1 ladref/accept.py:accept_one"
    assert near_copies.find_near_copies(tmp_path, ("task2_1",)) == []  # a task shipped solved is not looked for
    assert near_copies.main([str(tmp_path)]) == 1 and near_copies.main([str(tmp_path), "--solved", "2"]) == 0


def test_library_functions_doing_a_tasks_job_are_stubbed_until_its_assignment_is_over(copies):
    for name, over in (("a1", ()), ("a2", A1), ("a2s", A1)):
        for task in tasks_mod.TASKS:
            for module, functions in task.library_functions().items():
                found = dict(near_copies.functions(copies[name] / module))
                reference = dict(near_copies.functions(ROOT / module))
                for qualname in functions:
                    if task.marker in over:  # a later assignment's copy: the reference's code
                        assert ast.dump(found[qualname]) == ast.dump(reference[qualname]), (name, qualname)
                        continue
                    raised = ast.unparse(found[qualname].body[-1])
                    assert len(found[qualname].body) == 2 and raised.startswith("raise NotImplementedError"), qualname
                    assert f"{task.marker}: {qualname} does the job of task {task.number}" in raised
    assert tasks_mod.task_by_marker("task1_6").library_functions() == {
        "ladref/batched/static.py": ("StaticBatchCache.forward", "StaticBatchCache.commit")}
    # task 2.3's job has no one-prompt copy in the library: its only policy is the batch's tensor program
    # (`ladref.batched.policy.BatchPolicy`), which the task's rules forbid importing (`rule_check`)
    assert tasks_mod.task_by_marker("task2_3").library_functions() == {}
    assert "harvest" in tasks_mod.task_by_marker("task1_2").library_functions()["ladref/minimal.py"]
    for task in tasks_mod.tasks_of(1):  # shipped solved: the reference's code
        assert (copies["a2s"] / task.module).read_text() == (ROOT / task.reference_file).read_text()


# --- rule 4: a copy releases its assignment only ---


@pytest.mark.parametrize("name, work", [("a1", A1), ("a2", A2), ("a2s", A2)])
def test_a_copy_releases_its_assignments_tasks_only(copies, name, work):
    copy = copies[name]
    assert sorted(p.stem for p in (copy / "handouts").iterdir()) == work
    assert sorted(p.stem for p in (copy / "answers").iterdir()) == work
    shipped = tasks_mod.marked_files(copy / "tests", [t.marker for t in tasks_mod.TASKS])
    assert {m for p in shipped for m in tasks_mod.markers_used(p)} & set(A1 + A2) == set(work)
    assert [t.marker for t in runpy.run_path(str(copy / "assignments" / "tasks.py"))["TASKS"]] == work
    solved = A1 if name == "a2s" else []
    for task in tasks_mod.TASKS:
        text = (copy / task.module).read_text()
        assert (f'raise NotImplementedError("{task.marker}: implement' in text) == (task.marker not in solved), task.marker
    readme = (copy / "README.md").read_text()
    assert all(f"| {tasks_mod.task_by_marker(m).number} |" in readme for m in work)
    assert ("## Your earlier work" in readme) == (name == "a2")  # assignment 1's files: the student's own


def test_the_default_releases_every_task_and_ships_no_solution():
    plan = copy_plan.plan()
    assert list(plan.work) == list(tasks_mod.TASKS) and plan.solved == () and plan.stubbed == tasks_mod.TASKS
    assert [t.marker for t in copy_plan.plan(tasks=["task1_3"]).work] == ["task1_3"]
    assert [t.marker for t in copy_plan.plan(2, solved=["1"]).solved] == A1


@pytest.mark.parametrize("argv, message", [
    (["--assignment", "1", "--tasks", "task1_1"], "not allowed with"),
    (["--assignment", "3"], "no assignment 3"),
    (["--assignment", "2", "--solved", "task2_1"], "both released as work and shipped solved"),
    (["--tasks", "task1_1", "--solved", "task9"], "unknown task 'task9'"),
])
def test_bad_copy_options_are_refused_with_the_reason(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        make_student.main([str(tmp_path / "out"), *argv])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(TypeError, match="list of task markers"):
        copy_plan.plan(solved="1")


# --- 5. assignment 2's reading ---


def test_assignment_2_ships_the_sampling_and_cost_pages_and_tutorial_8(copies):
    for page in ("docs/sampling.md", "docs/cost_model.md"):
        assert page in handouts.READING and (copies["a2"] / page).read_text() == (ROOT / page).read_text()
    tutorial = copies["a2"] / "tutorials" / "08_speculative_sampling.py"
    assert tutorial.read_text() == (ROOT / "tutorials" / "08_speculative_sampling.py").read_text()
    listed = (copies["a2"] / "README.md").read_text().split("## Tutorials")[1].split("\n## ")[0]
    line = next(row for row in listed.splitlines() if "08_speculative_sampling.py" in row)
    assert "2.1" in line and "1.4" in line  # it runs task 2.1's rules and assignment 1's decoder
    assert not (copies["a1"] / "tutorials" / "08_speculative_sampling.py").exists()  # it needs task 2.1


# --- Gradescope: one zip per assignment, a budget that grades every task ---


def test_one_zip_per_assignment_with_a_budget_for_every_task(tmp_path, capsys):
    assert make_gradescope.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assignment1.zip", "assignment2.zip"]
    for number, work in ((1, A1), (2, A2)):
        with zipfile.ZipFile(tmp_path / f"assignment{number}.zip") as zf:
            assert zf.read(make_gradescope.TASKS_FILE).decode().split() == work
            assert float(zf.read(make_gradescope.BUDGET_FILE)) == make_gradescope.TASK_TIMEOUT_S * len(work)
    assert "budget 720 s" in capsys.readouterr().out
    with pytest.raises(ValueError, match="more than run_autograder's 1500 s limit"):
        make_gradescope.budget_for(["task1_1"] * 10)
    with pytest.raises(ValueError, match="give exactly one"):
        make_gradescope.make_gradescope(tmp_path / "x.zip")
    with pytest.raises(ValueError, match="no assignment 5"):
        make_gradescope.make_gradescope(tmp_path / "x.zip", assignment=5)
    script = (ROOT / "assignments" / "gradescope" / "run_autograder").read_text()
    limit = int(script.split("\nLIMIT_S=")[1].split()[0])
    assert limit == make_gradescope.RUN_LIMIT_S and '--budget $(cat "$BUDGET_FILE")' in script


# --- 7. the instructor's checklist for task 2.3's rules ---


def test_rule_check_passes_the_reference_and_flags_each_broken_rule(tmp_path, capsys):
    rule_check = load("rule_check")
    choice = tasks_mod.task_by_marker("task2_3")
    assert rule_check.main([str(ROOT)]) == 0  # the reference's answer (assignments/reference/course_choice.py) breaks no rule
    printed = capsys.readouterr().out
    assert printed.count("[pass]") == len(rule_check.RULES) and "[FLAG]" not in printed
    (tmp_path / "submitted" / "ladref").mkdir(parents=True)  # a submission folder: its task file is found at its path
    (tmp_path / "submitted" / choice.module).write_text((ROOT / choice.reference_file).read_text())
    assert rule_check.main([str(tmp_path / "submitted")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("[pass]") == len(rule_check.RULES) and "[FLAG]" not in printed
    assert all(f"[ ] {item}" in printed for item in rule_check.HAND_CHECKS)
    breaking = {  # one line per rule, each also allowed by none of the others' checks where it can be
        "no gc": "import gc",
        "ladref.fast": "from .pricing.policy import DraftPolicy",
        "stack frames": "frame = sys._getframe(1).f_back",
        "module state": "global STATE",
        "files, processes": "data = open('/autograder/source/x').read()",
        "imports only": "import torch",
    }
    for rule, line in breaking.items():
        body = line if line.startswith(("import", "from")) else f"def f():\n    {line}\n"
        (tmp_path / "course_choice.py").write_text("from .tree import DraftTree\n\n" + body + "\n")
        results = {r.name: flags for r, flags in rule_check.check_source((tmp_path / "course_choice.py").read_text())}
        flagged = [name for name, flags in results.items() if flags]
        assert any(rule in name for name in flagged), (rule, flagged)
        assert all(row > 1 for flags in results.values() for row, _ in flags)  # the allowed import is never flagged
    hidden = 'import importlib\nm = importlib.import_module("ladref.fast.adaptive")\n'  # a module name in a string
    assert any("ladref.fast" in r.name and flags for r, flags in rule_check.check_source(hidden))
    for line in ("from ladref import fast", "from ladref.batched.policy import BatchPolicy", "import ladref.pricing.acceptance"):
        assert any("ladref.fast" in r.name and flags for r, flags in rule_check.check_source(line + "\n")), line
    (tmp_path / "course_choice.py").write_text(hidden)
    assert rule_check.main([str(tmp_path / "course_choice.py")]) == 1
    assert "[FLAG] no importing adaptive decoding's policy" in capsys.readouterr().out
    assert rule_check.main([str(tmp_path / "empty")]) == 2  # no file to check
    with pytest.raises(SystemExit):
        rule_check.main([str(tmp_path), "--task", "task9"])
