"""The assignment generator and autograder (assignments/): the reference passes every task, and a
generated student version fails exactly the tasks it removed (plus the tasks that build on them)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = ROOT / "assignments"


def load(name: str):
    """Import assignments/<name>.py (the folder is a set of scripts, not a package)."""
    if str(ASSIGNMENTS) not in sys.path:
        sys.path.insert(0, str(ASSIGNMENTS))  # as the scripts themselves do
    return importlib.import_module(name)


tasks_mod = load("tasks")
make_student = load("make_student")
autograde = load("autograde")
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


def test_task_markers_are_the_registered_ones():
    config = (ROOT / "pyproject.toml").read_text()
    for task in tasks_mod.TASKS:
        assert f'"{task.marker}:' in config, f"{task.marker} is not registered in pyproject.toml"
        assert (ROOT / task.module).is_file()


def test_student_version_keeps_signatures_and_docstrings(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out)
    for task in tasks_mod.TASKS:
        ref, stu = functions_by_name(ROOT / task.module), functions_by_name(out / task.module)
        assert ref.keys() == stu.keys()
        for name, ref_fn in ref.items():
            stu_fn = stu[name]
            assert ast.dump(ref_fn.args) == ast.dump(stu_fn.args) and ast.get_docstring(ref_fn) == ast.get_docstring(stu_fn)
            if name in task.functions:
                raised = ast.unparse(stu_fn.body[-1])
                assert len(stu_fn.body) == 2 and raised.startswith("raise NotImplementedError") and task.marker in raised
            else:
                assert ast.dump(ref_fn) == ast.dump(stu_fn), f"{name} should be untouched"
    stubbed = {t.module for t in tasks_mod.TASKS}
    for path in (ROOT / "ladref").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in stubbed:
            assert (out / rel).read_text() == path.read_text(), f"{rel} should be copied verbatim"
    assert (out / "ASSIGNMENT.md").is_file() and (out / "tests" / "conftest.py").is_file()
    assert not (out / "tests" / "test_assignments.py").exists()  # only the library's tests are shipped


def test_generator_removes_only_the_chosen_task(tmp_path):
    out = tmp_path / "student"
    make_student.make_student(out, ["task1_3"])
    assert (out / "ladref" / "masks.py").read_text() == (ROOT / "ladref" / "masks.py").read_text()
    assert "task1_3: implement verify_greedy" in (out / "ladref" / "verify.py").read_text()
    with pytest.raises(ValueError, match="unknown task"):
        make_student.make_student(tmp_path / "other", ["task9"])


@pytest.mark.slow
def test_reference_passes_every_task():
    grade = autograde.grade(ROOT)
    assert Path(grade.ladref_file) == ROOT / "ladref" / "__init__.py"
    assert grade.passed == {marker: True for marker in ALL}, grade.output[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("removed", [ALL] + [[marker] for marker in ALL], ids=["all"] + ALL)
def test_student_version_fails_exactly_the_removed_tasks(tmp_path, removed):
    out = tmp_path / "student"
    make_student.make_student(out, removed)
    grade = autograde.grade(out)
    assert Path(grade.ladref_file) == out.resolve() / "ladref" / "__init__.py"  # the student's copy was graded
    assert grade.failed_tasks == tasks_mod.expected_failures(set(removed)), grade.output[-4000:]
