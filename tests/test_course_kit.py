"""The course kit's student copy: no shortcut left to a task, a lean install, the written
questions' hand-in files, stubs that say which task comes first, and docs that hide the solutions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from kit import load

ROOT = Path(__file__).resolve().parents[1]
tasks_mod, make_student, handouts = map(load, ("tasks", "make_student", "handouts"))

# functions outside a task's list that would solve (most of) it, now part of the task
SHORTCUTS = {
    "verify_chosen": ("task1_3", "from ladref.verify import verify_chosen\n"
                                 "verify_chosen(tree, torch.zeros(3), torch.zeros(1, 3), lambda context, logits, drafts: 0, [1])"),
    "DraftTree.path": ("task1_5", "tree.path(0)"),
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A student copy with every task removed."""
    out = tmp_path_factory.mktemp("kit") / "student"
    make_student.make_student(out)
    return out


def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """This interpreter run in `folder` (so that `ladref` is that folder's), without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300)


# --- 1. no shortcut left ---


@pytest.mark.parametrize("name", sorted(SHORTCUTS))
def test_a_shortcut_to_a_task_is_stubbed_in_the_copy(copy, name):
    marker, call = SHORTCUTS[name]
    assert name in tasks_mod.task_by_marker(marker).functions
    script = ("import torch\nfrom ladref import DraftTree\n"
              "tree = DraftTree(torch.tensor([1]), torch.tensor([-1]), ('s',))\n"
              f"try:\n    {call.replace(chr(10), chr(10) + '    ')}\nexcept NotImplementedError as err:\n    print(err)\n"
              "else:\n    print('solved')\n")
    proc = run_in(copy, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{marker}: implement {name} "), proc.stdout


def test_the_reference_solves_what_the_copy_stubs():
    # the same calls run on the reference (so the shortcut test fails for the right reason only)
    import torch

    from ladref import DraftTree
    from ladref.verify import verify_chosen

    tree = DraftTree(torch.tensor([1]), torch.tensor([-1]), ("s",))
    assert verify_chosen(tree, torch.zeros(3), torch.zeros(1, 3), lambda context, logits, drafts: 0, [1]).tokens.tolist() == [0]
    assert tree.path(0) == [0]


# --- 2. a lean install ---


def test_the_copy_installs_only_what_its_tests_need(copy):
    extras = tomllib.loads((copy / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["student"] == ["pytest>=8", "hypothesis>=6.100"]
    assert handouts.INSTALL == 'python -m pip install -c constraints.txt -e ".[student]"'
    assert handouts.INSTALL in (copy / "README.md").read_text()
    assert not re.search(r"jupyter|mkdocs", (copy / "README.md").read_text(), flags=re.I)


# --- 3. the written questions ---


def test_answers_file_names_the_tasks_hand_in_file():
    assert [tasks_mod.answers_file(t) for t in tasks_mod.TASKS] == [f"answers/{t.marker}.md" for t in tasks_mod.TASKS]
    with pytest.raises(TypeError, match="takes a Task"):
        tasks_mod.answers_file("task1_1")


def test_question_points_are_checked():
    task = tasks_mod.TASKS[0]
    assert all(t.question_points == 4 for t in tasks_mod.TASKS)
    with pytest.raises(ValueError, match="split evenly over 2 questions"):
        tasks_mod.Task(task.marker, task.title, task.module, task.functions, question_points=3)
    with pytest.raises(TypeError, match="must be an int"):
        tasks_mod.Task(task.marker, task.title, task.module, task.functions, question_points="4")


def test_handouts_give_the_questions_points_and_a_file():
    for task in tasks_mod.TASKS:
        text = handouts.render_handout(task)
        questions = text.split("## Written questions")[1].split("## Submit")[0]
        assert f"({task.question_points} points, graded by hand)" in questions
        assert f"write your answers in `{tasks_mod.answers_file(task)}`" in questions.lower()
        assert tasks_mod.answers_file(task) in text.split("## Submit")[1]


def test_the_copy_has_an_answers_file_per_task_with_empty_answers(copy):
    for task in tasks_mod.TASKS:
        text = (copy / tasks_mod.answers_file(task)).read_text()
        headings = re.findall(r"^## (\d)\. (.+) \(2 points\)$", text, flags=re.M)
        assert headings == [(str(i), q) for i, q in enumerate(handouts.written_questions(task), 1)]
        assert [chunk.strip() for chunk in re.split(r"^## .*$", text, flags=re.M)[1:]] == ["", ""]  # no answer yet
    submit = (copy / "README.md").read_text().split("## Submit")[1]
    assert "`answers/`" in submit and all(tasks_mod.answers_file(t) in submit for t in tasks_mod.TASKS)


def test_a_partial_copy_has_the_answers_files_of_its_tasks_only(tmp_path):
    make_student.make_student(tmp_path / "one", ["task1_3"])
    assert [p.name for p in (tmp_path / "one" / "answers").iterdir()] == ["task1_3.md"]


# --- 4. a stub says which task comes first ---


def test_stub_messages_name_the_tasks_that_need_them():
    assert (make_student.stub_message("task1_5", "DraftTree.extend")
            == "task1_5: implement DraftTree.extend (see its docstring); tasks 1.1, 1.3 and 1.4 need it first")
    assert make_student.stub_message("task1_3", "verify_greedy").endswith("(see its docstring); task 1.4 needs it first")
    assert make_student.stub_message("task1_4", "draft_step") == "task1_4: implement draft_step (see its docstring)"
    for task in tasks_mod.TASKS:  # derived from Task.requires
        direct = {t.marker for t in tasks_mod.TASKS if task.marker in t.requires}
        assert direct <= {t.marker for t in tasks_mod.dependents(task.marker)}
    assert [make_student.spoken_list(x) for x in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a and b", "a, b and c"]


def test_a_test_stopped_by_another_tasks_stub_names_that_task(copy):
    proc = run_in(copy, "-m", "pytest", "-m", "task1_1", "-x", "-p", "no:cacheprovider")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    line = "task1_1 needs task 1.5 (the draft tree and its mask) first: finish it, then come back (README: the order)"
    assert line in proc.stdout, proc.stdout[-3000:]
    assert "## The order" in (copy / "README.md").read_text()
    own = run_in(copy, "-m", "pytest", "-m", "task1_5", "-x", "-p", "no:cacheprovider")  # its own stub: no such line
    assert own.returncode == 1 and "task1_5: implement" in own.stdout and " needs task " not in own.stdout


# --- 5. the docs do not show the task modules' source ---


def documented_objects(folder: Path) -> dict[str, str]:
    """`::: name` block of each Markdown file of `folder` -> the indented options text under it."""
    blocks = {}
    for path in sorted(folder.glob("*.md")):
        for name, options in re.findall(r"^::: (\S+)\n((?:[ \t]+\S.*\n?)*)", path.read_text(), flags=re.M):
            blocks[name] = options
    return blocks


def test_the_docs_hide_the_source_of_the_task_modules():
    blocks = documented_objects(ROOT / "docs" / "reference")
    modules = {t.module.removesuffix(".py").replace("/", ".") for t in tasks_mod.TASKS}
    for module in modules:
        shown = [name for name in blocks if name == module or name.startswith(module + ".")]
        assert shown, f"{module} is not in the API reference"
        for name in shown:
            assert re.search(r"^\s+show_source:\s*false\b", blocks[name], flags=re.M), f"{name} shows its source"
    others = [options for name, options in blocks.items() if not any(name == m or name.startswith(m + ".") for m in modules)]
    assert others and not any("show_source: false" in options for options in others)  # the rest keep the default
    assert re.search(r"^\s+show_source: true\b", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
