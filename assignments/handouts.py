"""The course handouts, rendered from the task table (`tasks.py`) and each task's prose.

    python assignments/handouts.py            # print every task's handout
    python assignments/handouts.py task1_3    # one of them

``handouts/<marker>.md`` holds only what a person must write, as the sections of
`REQUIRED_SECTIONS` in that order (level-2 headings); "The rule" starts with `WHOSE_RULE`, saying
whose rule the task implements (the paper's, ladref's own, or another work's). Everything else in a handout is generated:
the facts (file, functions, points, time, what it builds on, from `tasks.py`), what each public
test checks (the test functions carrying the task's marker, read with `ast`), the commands, the
grading rules and how to submit. `make_student.py` writes the handouts into a student copy, and
the documentation site's Assignments page shows them (`mkdocs_hook.py`).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from copy_plan import CopyPlan  # noqa: E402
from overview import assignment_of, by_assignment, held_back, points_summary, shipped_tutorials, tutorials, tutorials_note  # noqa: E402
from tasks import QUESTIONS, TASKS, Task, answers_file, marked_files, task_by_marker, work_order  # noqa: E402

REPO = HERE.parent
PROSE = HERE / "handouts"
REQUIRED_SECTIONS = ("Goal", "The rule", "Specification", "Hints", "Written questions")
WHOSE_RULE = "**Whose rule:** "  # how "The rule" starts: the paper's, ladref's own, or another work's
INSTALL = 'python -m pip install -c constraints.txt -e ".[student]"'  # the package, pytest and Hypothesis only
PAPER = ('Yichao Fu, Peter Bailis, Ion Stoica and Hao Zhang, "Break the Sequential Dependency of LLM Inference Using '
         'Lookahead Decoding", ICML 2024, arXiv:2402.02057 (<https://arxiv.org/abs/2402.02057>)')
READING = ("docs/concepts.md", "docs/glossary.md", "docs/sampling.md", "docs/cost_model.md")  # pages a student copy ships


def student_commands(task: Task | None = None) -> list[tuple[str, str]]:
    """(command, what it does) pairs a student runs in their copy: for one task, or for all of them."""
    if task is None:
        return [(INSTALL, "install the project and its test tools (once)"),
                ("python -m pytest", "run every task's public tests"),
                ("python assignments/autograde.py", "grade every task on the public tests, with points")]
    return [(f"python -m pytest -m {task.marker} -x", "run this task's public tests, stopping at the first failure"),
            (f"python -m pytest -m {task.marker}", "run all of them"),
            (f"python assignments/autograde.py {task.marker}", "grade this task on the public tests, with points")]


def command_block(commands: list[tuple[str, str]]) -> str:
    """Commands for a bash block, each under a comment saying what it does."""
    return "\n".join(f"# {why}\n{command}" for command, why in commands)


def prose(task: Task) -> dict[str, str]:
    """The hand-written sections of a task's handout, checked against `REQUIRED_SECTIONS`."""
    path = PROSE / f"{task.marker}.md"
    if not path.is_file():
        raise FileNotFoundError(f"{task.marker} has no handout text: write {path.relative_to(REPO)}")
    parts = re.split(r"^## (.+)\n", path.read_text(), flags=re.M)
    sections = {title.strip(): body.strip() for title, body in zip(parts[1::2], parts[2::2])}
    if tuple(sections) != REQUIRED_SECTIONS:
        raise ValueError(f"{path.name} must have the sections {REQUIRED_SECTIONS} in that order, has {tuple(sections)}")
    if not sections["The rule"].startswith(WHOSE_RULE):
        raise ValueError(f"{path.name}: 'The rule' must start with {WHOSE_RULE.strip()!r} and say whose it is "
                         "(the paper's, ladref's own, or another work's)")
    return sections


def written_questions(task: Task) -> list[str]:
    """The task's written questions, each on one line without its number (from its handout's prose)."""
    text = prose(task)["Written questions"]
    items = [" ".join(item.split()) for item in re.split(r"^\d+\. ", text, flags=re.M)[1:]]
    if len(items) != QUESTIONS:
        raise ValueError(f"{task.marker}.md must ask {QUESTIONS} numbered written questions, asks {len(items)}")
    return items


def questions_note(task: Task) -> str:
    """The line above a task's written questions: where the answers go, and their points."""
    return f"Write your answers in `{answers_file(task)}` ({task.question_points} points, graded by hand)."


def answers_template(task: Task) -> str:
    """The answers file a student copy starts with: each question as a heading, an empty answer under it."""
    each = task.question_points // QUESTIONS
    parts = [f"# Task {task.number}: answers to the written questions",
             f"Write each answer under its question ({task.question_points} points, graded by hand). "
             "Hand this file in with your code."]
    parts += [f"## {number}. {question} ({each} points)\n\n" for number, question in enumerate(written_questions(task), 1)]
    return "\n\n".join(parts)


def public_checks(task: Task, tests: Path) -> list[tuple[str, str]]:
    """(test file::function, what it checks) for each public test of `task` (the docstring's first
    paragraph on one line, else the function's name in words)."""
    checks = []
    for path in marked_files(tests, [task.marker]):
        tree = ast.parse(path.read_text())
        whole_file = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                         and task.marker in ast.unparse(n.value) for n in tree.body)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                if whole_file or task.marker in " ".join(ast.unparse(d) for d in node.decorator_list):
                    doc = (ast.get_docstring(node) or node.name.removeprefix("test_").replace("_", " ")).split("\n\n")[0]
                    doc = " ".join(doc.split())
                    checks.append((f"{path.name}::{node.name}", doc))
    return checks


def shift(text: str, levels: int) -> str:
    """Markdown headings moved `levels` deeper (outside code blocks)."""
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        out.append("#" * levels + line if line.startswith("#") and not fenced else line)
    return "\n".join(out)


def code(text: str, html: bool = False) -> str:
    """Inline code; with `html`, kept on one line on the site (no file name broken mid-word)."""
    return f'<code class="nowrap">{text}</code>' if html else f"`{text}`"


def facts(task: Task, html: bool = False) -> str:
    """The table at the top of a handout (the points out of its assignment's autograded points)."""
    number = assignment_of(task)
    total = sum(t.points for t in by_assignment()[number])
    points = f"{task.points} of {total} (assignment {number}'s autograder), and {task.question_points} for the written questions"
    rows = [("File", code(task.module, html)), ("You write", ", ".join(code(f, html) for f in task.functions)),
            ("Points", points), ("Time", f"about {task.hours} hours")]
    if task.requires:
        needs = ", ".join(f"task {task_by_marker(m).number}" for m in task.requires)
        them = "it" if len(task.requires) == 1 else "them"
        rows.append(("Builds on", f"{needs}: this task's public tests run your code of {them}, so finish {them} first"))
    return f"| Task | {task.number} |\n|---|---|\n" + "\n".join(f"| {key} | {value} |" for key, value in rows)


def render_handout(task: Task, tests: Path = REPO / "tests", level: int = 1, html: bool = False) -> str:
    """The full handout of `task` as Markdown, its title at heading `level` (`html`: for the site)."""
    text = prose(task)
    checks = "\n".join(f"* `{name}`: {doc}" for name, doc in public_checks(task, tests))
    commands = command_block(student_commands(task))
    parts = [
        f"# Task {task.number}: {task.title}", facts(task, html),
        "## Goal", text["Goal"], "## The rule", text["The rule"],
        "## Specification (what the tests check)", text["Specification"],
        f"The public tests of this task (marker `{task.marker}`), in `tests/`:", checks or "* (none yet)",
        "## Hints", text["Hints"],
        "## Check your work", f"From the folder that holds `ladref/`:\n\n```bash\n{commands}\n```",
        "## Grading",
        f"The task is worth {task.points} points, split over the autograder's groups of cases: each group calls your "
        "functions on cases drawn by the reference solution and compares what they return with the reference's answers "
        "(a group earns its share times the fraction of its cases that pass: answered exactly, unless the Specification "
        "above says how else its cases are judged). Visible groups, small cases drawn "
        "anew at every grading, are shown at once, with the first call that differs; hidden groups (larger, deeper cases) "
        "after the due date. The public tests above check the same kinds of answers as the grader, on fewer and smaller "
        "cases (the grader's cases are its own): pass them first, but passing them does not promise full marks. Your "
        f"`{task.module}` is graded on its own, with the reference's code for every other file: write the whole task in "
        "that file. Code that does not import scores 0 for the task, and a call that runs longer than its time limit "
        "fails.",
        "## Written questions", questions_note(task), text["Written questions"],
        "## Submit", f"Hand in `{task.module}` and `{answers_file(task)}` (or your whole folder: only the task files "
        "are run, and the answers are read by hand).",
    ]
    return shift("\n\n".join(parts), level - 1) + "\n"


def overview_table(tasks: list[Task], html: bool = False) -> str:
    """One row per task: number, title, file, points, time (file names unbroken on the site with `html`)."""
    rows = [f"| {t.number} | {t.title} | {code(t.module, html)} | {t.points} | {t.hours} h | {code(t.marker, html)} |" for t in tasks]
    return "| Task | What you build | File | Points | Time | Marker |\n|---|---|---|---|---|---|\n" + "\n".join(rows)


def submit_note(tasks: list[Task]) -> str:
    """How to hand in a student copy: the task files and the answers to the written questions."""
    files = ", ".join(f"`{t.module}`" for t in tasks) or "the task files"
    answers = ", ".join(f"`{answers_file(t)}`" for t in tasks) or "one file per task"
    return f"Hand in the task files ({files}) and the `answers/` folder ({answers}), or this whole folder zipped."


def earlier_work_note(copy_plan: CopyPlan) -> str:
    """What a copy needs of the student's earlier assignments: the files of the stubbed earlier tasks
    that this copy's tests or tutorials run ("" when there are none)."""
    if not copy_plan.earlier:
        return ""
    files = ", ".join(f"`{t.module}` ({t.number})" for t in copy_plan.earlier)
    return ("## Your earlier work\n\nThis copy holds the earlier assignment's functions as stubs: "
            f"{files}. Some tasks here build on them (their handouts say which) and so do some tutorials: copy "
            "your own files of the earlier assignment into this folder, at the same paths, before you start.")


def student_readme(copy_plan: CopyPlan) -> str:
    """The README.md of a student copy: start here."""
    tasks = list(copy_plan.work)
    commands = command_block(student_commands())
    return "\n\n".join([
        "# ladref course assignment",
        "You will rebuild the core of lookahead decoding (Fu et al., ICML 2024) inside `ladref`, a small "
        "PyTorch library. The functions to write keep their signature and docstring; their body is a "
        "`raise NotImplementedError`, after the solution's numbered steps as `# TODO` lines where it has them. "
        "Each task has a handout in `handouts/`: its goal, the rule it follows (the paper's, or ladref's own), "
        "the exact specification, hints, points, a time estimate and two written questions.",
        overview_table(tasks), points_summary(tasks),
        "## Reading", reading_note(),
        "## Set up and check your work",
        f"From this folder, with Python 3.10+:\n\n```bash\n{commands}\n```",
        "On Linux, pip's default torch is the CUDA build (several GB). For the smaller CPU-only build, run "
        "`python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu` before the "
        "install command; it keeps that build.",
        "Per task: `python -m pytest -m task1_2 -x` (stop at the first failure), `python assignments/autograde.py "
        "task1_2` (points). The tests always run the `ladref/` of this folder: `pyproject.toml` puts it first on "
        "pytest's path and `conftest.py` stops the run if anything else would be imported. Property tests "
        "(Hypothesis) report the first failing example they find; add `--hypothesis-profile=dev` to one test's "
        "command to have it shrunk to a minimal one.",
        "## Rules",
        "* Write each task in its own file (the table above); only those files are graded, each on its own.\n"
        "* The tests are for you: grading calls your functions on cases of its own and compares the answers with the "
        "reference's, so editing the tests changes nothing.\n"
        "* Answer each task's two written questions in `answers/` (one file per task, the questions already "
        "there as headings); they are graded by hand.",
        "## The order",
        "Work in this order: " + ", ".join(t.number for t in work_order(tasks)) + ". A task's tests run your "
        "code of the tasks it builds on (its handout says which), so finish those first. A test that stops at "
        "another task's unfinished function says so: its failure names the task to finish first.",
        *filter(None, [earlier_work_note(copy_plan)]),
        "## Tutorials", tutorials_note(copy_plan.stubbed, shipped_tutorials(copy_plan.past, copy_plan.doable)),
        "## Submit", submit_note(tasks),
    ]) + "\n"


def reading_note() -> str:
    """The student README's reading list: the paper, and the documentation pages the copy ships (`READING`)."""
    return (f"* The paper: {PAPER}.\n"
            "* `docs/concepts.md`: the ideas (Jacobi iterations, the 2-D window and the n-gram pool, the combined step, "
            "draft trees), each with the ladref code that implements it.\n"
            "* `docs/glossary.md`: the paper's terms with ladref's names for them and those of the paper's own code.\n"
            "* `docs/sampling.md`: sampling with drafts: the accept rule of speculative sampling, for one draft and for "
            "several, and why the output keeps the model's law.\n"
            "* `docs/cost_model.md`: what a forward pass costs as it feeds more tokens, and how a step's choice "
            "trades that cost against the tokens it accepts.\n\n"
            "The pages come from the project's documentation; their links to its other pages lead nowhere here.")


def instructor_notes(html: bool = False) -> str:
    """Which tutorial to hold back until which task's deadline (`overview.held_back`)."""
    held = held_back()
    rows = "\n".join(f"| {code(f'tutorials/{name}.py', html)} | {', '.join(f'{t.number} {t.title}' for t in tasks)} |"
                     for name, tasks in sorted(held.items()))
    safe = ", ".join(code(f"tutorials/{name}.py", html) for name in tutorials() if name not in held) or "none"
    return ("| Tutorial | Shows the solution of: hand it out after these tasks' deadlines |\n|---|---|\n"
            f"{rows}\n\nThe task table names no other tutorial ({safe}): those can go out with the course. Each "
            "assignment's student copy ships, in `tutorials/`, those that run only tasks its students can have done "
            "(so tutorial 8, which runs task 2.1, comes with assignment 2), and lists the tasks each one needs finished; "
            "assignment 2's copy also ships the tutorials held back for assignment 1.")


def site_sections() -> dict[str, str]:
    """The generated parts of the site's Assignments page, by marker (see `mkdocs_hook.py`)."""
    return {
        "<!-- course-kit: tasks -->": overview_table(list(TASKS), html=True) + "\n\n" + points_summary(),
        "<!-- course-kit: instructor-notes -->": instructor_notes(html=True),
        "<!-- course-kit: handouts -->": "\n\n".join(render_handout(t, level=3, html=True) for t in TASKS),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for task in [task_by_marker(m) for m in args] or TASKS:
        print(render_handout(task))
    return 0


if __name__ == "__main__":
    sys.exit(main())
