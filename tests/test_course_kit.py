"""The course kit's student copy: no shortcut left to a task, a lean install, the written
questions' hand-in files, stubs that say which task comes first, docs that hide the solutions, the
reading and the tutorials it ships; the instructor's answer keys (complete, never shipped), the
points stated once, and handouts that say whose rule they teach."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest
from kit import load

ROOT = Path(__file__).resolve().parents[1]
tasks_mod, make_student, handouts, overview = map(load, ("tasks", "make_student", "handouts", "overview"))
INSTRUCTOR = ROOT / "assignments" / "instructor"

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
    assert all(t.question_points > 0 and t.question_points % 2 == 0 for t in tasks_mod.TASKS)
    with pytest.raises(ValueError, match="split evenly over 2 questions"):
        tasks_mod.Task(task.marker, task.title, task.module, task.functions, question_points=3)
    with pytest.raises(TypeError, match="must be an int"):
        tasks_mod.Task(task.marker, task.title, task.module, task.functions, question_points="4")


def test_a_course_answer_the_library_does_not_hold_is_placed_at_its_task_file():
    choice = tasks_mod.task_by_marker("task2_3")
    assert (choice.module, choice.reference_file) == ("ladref/course_choice.py", "assignments/reference/course_choice.py")
    assert tasks_mod.course_answers() == {choice.module: choice.reference}
    assert all(t.reference_file == t.module for t in tasks_mod.TASKS if t is not choice)
    with pytest.raises(ValueError, match="lives outside ladref/"):
        tasks_mod.Task(choice.marker, choice.title, choice.module, choice.functions, reference="ladref/other.py")
    import ladref.course_choice  # the reference's tests import it as students' copies have it (conftest.py)

    assert Path(ladref.course_choice.__file__) == ROOT / choice.reference and ladref.course_choice.__package__ == "ladref"


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
        headings = re.findall(rf"^## (\d)\. (.+) \({task.question_points // 2} points\)$", text, flags=re.M)
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
            == "task1_5: implement DraftTree.extend (see its docstring); tasks 1.1, 1.3, 1.4 and 2.3 need it first")
    assert make_student.stub_message("task1_3", "verify_greedy").endswith("(see its docstring); tasks 1.4 and 2.3 need it first")
    assert make_student.stub_message("task1_4", "draft_step").endswith("(see its docstring); task 2.3 needs it first")
    assert make_student.stub_message("task1_2", "NGramPool.add").endswith("(see its docstring); tasks 1.4 and 2.3 need it first")
    assert make_student.stub_message("task1_6", "BatchCache.commit") == "task1_6: implement BatchCache.commit (see its docstring)"
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
    modules = {t.module.removesuffix(".py").replace("/", ".") for t in tasks_mod.TASKS if not t.reference}  # in the library
    for module in modules:
        shown = [name for name in blocks if name == module or name.startswith(module + ".")]
        assert shown, f"{module} is not in the API reference"
        for name in shown:
            assert re.search(r"^\s+show_source:\s*false\b", blocks[name], flags=re.M), f"{name} shows its source"
    others = [options for name, options in blocks.items() if not any(name == m or name.startswith(m + ".") for m in modules)]
    assert others and not any("show_source: false" in options for options in others)  # the rest keep the default
    assert re.search(r"^\s+show_source: true\b", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    answers = {m.removesuffix(".py").replace("/", ".") for m in tasks_mod.course_answers()}  # no part of the library
    assert answers and not [name for name in blocks for m in answers if name == m or name.startswith(m + ".")]


# --- 6. the instructor's answer keys: one per task, complete, never shipped ---


def question_sections(text: str) -> dict[str, str]:
    """"## Question k" heading -> the text under it (up to the next level-2 heading)."""
    parts = re.split(r"^## (.+)\n", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2]) if title.startswith("Question")}


def rubric_points(section: str) -> tuple[Fraction, list[Fraction]]:
    """The points a section's "Rubric (P points):" announces, and those of its criteria ("* 1 point: ...")."""
    found = re.search(r"^Rubric \((\d+(?:\.\d+)?) points?\):\s*$((?:.|\n)*)", section, flags=re.M)
    assert found, "no 'Rubric (P points):' line"
    criteria = re.findall(r"^[*-] \(?(\d+(?:\.\d+)?) points?\b", found.group(2), flags=re.M)
    return Fraction(found.group(1)), [Fraction(c) for c in criteria]


@pytest.mark.parametrize("task", tasks_mod.TASKS, ids=lambda t: t.marker)
def test_each_task_has_model_answers_with_rubrics_that_add_up(task):
    path = INSTRUCTOR / "answers" / f"{task.marker}.md"
    assert path.is_file(), f"write {path.relative_to(ROOT)}"
    sections = question_sections(path.read_text())
    assert list(sections) == [f"Question {k}" for k in range(1, tasks_mod.QUESTIONS + 1)]
    for (title, section), question in zip(sections.items(), handouts.written_questions(task)):
        quoted = re.findall(r"^> (.+)$", section, flags=re.M)
        assert not quoted or " ".join(quoted) == question, f"{task.marker} {title} quotes an old version of its question"
        announced, criteria = rubric_points(section)
        assert announced == Fraction(task.question_points, tasks_mod.QUESTIONS), f"{task.marker} {title}"
        assert criteria and sum(criteria) == announced, f"{task.marker} {title}: criteria give {sum(criteria)} points"
        assert len(section.split("Rubric (")[0].split()) > 50, f"{task.marker} {title}: no model answer"


def test_rubric_points_are_read_from_their_criteria():
    announced, criteria = rubric_points("answer\n\nRubric (2 points):\n\n* 1 point: a\n* 0.5 points: b\n- (0.5 points) c\n")
    assert announced == 2 and criteria == [1, Fraction(1, 2), Fraction(1, 2)]
    with pytest.raises(AssertionError, match="no 'Rubric"):
        rubric_points("an answer without a rubric")


def test_the_copy_never_ships_the_instructor_folder(copy):
    assert not [p for p in copy.rglob("*") if "instructor" in p.parts or p.name == "tutorial_needs.json"]
    assert sorted(p.name for p in (copy / "assignments").iterdir()) == sorted(make_student.ASSIGNMENT_FILES)
    keys = [p.read_text() for p in INSTRUCTOR.rglob("*.md")]
    assert keys and not any(p.read_text() in keys for p in copy.rglob("*.md"))


def test_the_instructor_readme_is_generated_from_the_task_table():
    text = (INSTRUCTOR / "README.md").read_text()
    assert overview.generated() in text, "out of date: python assignments/overview.py --write"
    for task in tasks_mod.TASKS:
        assert f"| {task.number} | {task.short_title} | {task.points} | {task.question_points} |" in text
    order = overview.work_order_table().splitlines()[2:]
    assert [row.split(" | ")[1].split()[0] for row in order] == [t.number for t in tasks_mod.work_order()]


# --- 7. the points, stated once ---


def test_the_points_are_stated_once_and_add_up(copy):
    summary = overview.points_summary()
    for number, group in overview.by_assignment().items():
        auto, written = sum(t.points for t in group), sum(t.question_points for t in group)
        assert f"Assignment {number} ({overview.span(group)}): {auto} points from the autograder and {written} " in summary
        assert f"{auto + written} points in all" in summary
    readme = (copy / "README.md").read_text()
    assert readme.count(summary) == 1 and readme.count("points in all") == summary.count("points in all")
    assert handouts.site_sections()["<!-- course-kit: tasks -->"].count("points in all") == summary.count("points in all")
    totals = {str(n) for g in overview.by_assignment().values() for t in (sum(x.points for x in g),
              sum(x.question_points for x in g)) for n in (t, sum(x.points + x.question_points for x in g))}
    for path in (ROOT / "assignments" / "README.md", ROOT / "docs" / "assignments.md", INSTRUCTOR / "README.md"):
        text = path.read_text().replace(overview.generated(), "")
        stated = re.findall(r"\b(\d+) points\b", text)
        assert "points in all" not in text and not set(stated) & totals, f"{path.name} states a total by hand: {stated}"
    for task in tasks_mod.TASKS:
        total = sum(t.points for t in overview.by_assignment()[overview.assignment_of(task)])
        assert f"| Points | {task.points} of {total} (" in handouts.render_handout(task)


# --- 8. what a student copy gives to read and to run ---


def test_the_copy_ships_the_concepts_the_glossary_and_the_paper(copy):
    for page in handouts.READING:
        assert (copy / page).read_text() == (ROOT / page).read_text()
    reading = (copy / "README.md").read_text().split("## Reading")[1].split("\n## ")[0]
    assert "arXiv:2402.02057" in reading and "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding" in reading
    assert all(f"`{page}`" in reading for page in handouts.READING)


def test_the_copy_ships_the_tutorials_no_task_holds_back_with_what_they_need(copy):
    needs, held = json.loads((ROOT / "assignments" / "tutorial_needs.json").read_text()), overview.held_back()
    for name in overview.tutorials():  # every tutorial a copy may ship has been traced
        assert name in needs or name in held, f"trace it: python assignments/tutorial_needs.py {name[:2]}"
    assert set(needs) <= set(overview.tutorials()), "tutorial_needs.json names a tutorial that is gone"
    assert all(set(entry["tasks"]) <= {t.marker for t in tasks_mod.TASKS} for entry in needs.values())
    shipped = sorted(p.stem for p in (copy / "tutorials").glob("[0-9][0-9]_*.py"))
    assert shipped == overview.shipped_tutorials() and shipped and not set(shipped) & set(held)
    assert (copy / "tutorials" / "run.py").is_file()
    listed = (copy / "README.md").read_text().split("## Tutorials")[1].split("\n## ")[0]
    for name in shipped:
        assert (copy / "tutorials" / f"{name}.py").read_text() == (ROOT / "tutorials" / f"{name}.py").read_text()
        assert all((copy / path).is_file() for path in needs[name]["reads"])
        line = next(row for row in listed.splitlines() if f"`tutorials/{name}.py`" in row)
        assert ("at once" in line) == (not needs[name]["tasks"])
        assert all(tasks_mod.task_by_marker(m).number in line for m in needs[name]["tasks"])


# --- 9. the handouts: whose rule, and the batch cache's probes ---


def test_each_handout_says_whose_rule_it_teaches(tmp_path, monkeypatch):
    for task in tasks_mod.TASKS:
        assert handouts.prose(task)["The rule"].startswith(handouts.WHOSE_RULE)
        assert "## The rule\n" in handouts.render_handout(task) and "The paper's rule" not in handouts.render_handout(task)
    text = (ROOT / "assignments" / "handouts" / "task1_2.md").read_text()
    monkeypatch.setattr(handouts, "PROSE", tmp_path)
    (tmp_path / "task1_2.md").write_text(text.replace(handouts.WHOSE_RULE, "", 1))
    with pytest.raises(ValueError, match="must start with"):
        handouts.prose(tasks_mod.task_by_marker("task1_2"))


def test_the_batch_cache_probes_include_batches_without_rows():
    sys.path.insert(0, str(ROOT / "assignments" / "hidden"))
    probes = importlib.import_module("task1_6")
    cases = probes.cases(1)
    for group in ("plan (small steps)", "plan", "commit on a labelled cache (small)", "commit on a labelled cache"):
        empty = [case for case in cases[group] if not case["counts"]]
        assert empty, f"{group}: no case with B = 0"
        answer = probes.GROUPS[group].observe(empty[0])  # the reference answers them
        if "shapes" in answer:
            assert answer["shapes"] == [[0, empty[0]["K"]]] * 2 and answer["sources"] == []
        else:
            assert answer["marked"] == [] and answer["arguments unchanged"]
