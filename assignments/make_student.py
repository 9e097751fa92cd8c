"""Generate a student copy of the course from the reference implementation.

    python assignments/make_student.py OUT --assignment N [--solved 1]
    python assignments/make_student.py OUT --tasks task1_1 task1_3
    python assignments/make_student.py OUT                  # every task released as work

Every function of every task is a stub in the copy unless the copy ships the task solved
(`copy_plan.plan`): the tasks released as work (assignment N's, those of ``--tasks``, or all of
them without either option) keep their signature, docstring and numbered step comments (as
``# TODO 1. ...`` lines) but have their body replaced by ``raise NotImplementedError("task1_k:
...")`` (naming the tasks whose tests need it first), and so have the other tasks', which ship
nothing else; the library functions doing a task's job (`tasks.Task.library_copies`) are stubbed
with it until its assignment is over. ``--solved`` (assignment numbers or markers) ships those
tasks' reference code:

    OUT/README.md        start here: set-up, the tasks, the commands, how to submit
    OUT/handouts/        one handout per released task (goal, rule, spec, hints, points, questions)
    OUT/answers/         one file per released task for the answers to its written questions
    OUT/ladref/          the package, with the task bodies removed; a course answer the library does not
                         hold (`tasks.Task.reference`: task 2.3's ladref/course_choice.py) is written
                         into it from assignments/, at the task's file, as the other task files are
    OUT/tests/           the public tests: the test files that carry a released task's marker,
                         the helpers they import and the data files they read (tests/data/<name>,
                         shipped when a public test names it): nothing that needs files the
                         copy lacks
    OUT/conftest.py      stops pytest when `import ladref` would not be this folder's package
    OUT/pyproject.toml   the project file, pytest pinned to this folder (``pythonpath = ["."]``)
    OUT/constraints.txt  the pins of the README's install command
    OUT/assignments/     the autograder and the task table (its TASKS: the released tasks)
    OUT/docs/            the pages to read (`handouts.READING`)
    OUT/tutorials/       the tutorials that show no solution of the copy's tasks and run only tasks
                         its students can have done, with `run.py` and the repository files they
                         read (``tutorial_needs.json``)

Nothing is hand-copied: bodies are located with `ast` in the reference sources, so the student
version always matches the current reference. The probes that grade (``assignments/hidden/``), the
answer keys (``assignments/instructor/``), task 2.3's reference answer (``assignments/reference/``,
shipped only as the stubbed or solved ``ladref/course_choice.py``), this generator and the handouts'
sources stay with the instructor. `near_copies.py` checks a copy for near copies of the graded functions.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import sys
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from copy_conftest import conftest_source  # noqa: E402
from copy_plan import CopyPlan, plan  # noqa: E402
from handouts import READING, answers_template, render_handout, student_readme  # noqa: E402
from overview import shipped_tutorials  # noqa: E402
from tasks import TASKS, Task, answers_file, course_answers, dependents, marked_files  # noqa: E402
from tutorial_needs import load_needs  # noqa: E402

REPO = HERE.parent
COPIED_FILES = ("pyproject.toml", "constraints.txt")
ASSIGNMENT_FILES = ("autograde.py", "grades.py", "selfcheck.py", "grading_plugin.py", "report.py", "tasks.py")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
STEP_COMMENT = re.compile(r"#\s*(\d+)\.\s")  # "# 1. Candidates: ..." (HF-style numbered steps)



def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    """The (async) function or method `qualname` ("func" or "Class.method") of a module."""
    scope: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        classes = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner]
        if not classes:
            raise LookupError(f"class {owner!r} not found (looking for {qualname})")
        scope = classes[0].body
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise LookupError(f"function {qualname!r} not found")


def docstring_end(func: ast.FunctionDef, qualname: str) -> int:
    """Last line (1-based) of the function's docstring; a task function must have one."""
    first = func.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)):
        raise ValueError(f"{qualname} has no docstring; a task function must document what to implement")
    if len(func.body) == 1:
        raise ValueError(f"{qualname} has nothing but a docstring; there is no body to remove")
    return first.end_lineno


def step_comments(lines: list[str], start: int, end: int) -> list[str]:
    """The numbered step comments of lines start+1..end (1-based), with their continuation lines.

    A step comment is a whole-line comment ``# 1. ...``; the whole-line comments right below it
    that are indented past its ``#`` by two or more spaces (``#    ...``) continue it.
    """
    body = "".join(lines[start:end])
    comments = {}  # line (1-based, within the body) -> comment text, whole-line comments only
    for tok in tokenize.generate_tokens(io.StringIO(body).readline):
        if tok.type == tokenize.COMMENT and not tok.line[: tok.start[1]].strip():
            comments[tok.start[0]] = tok.string
    kept, previous = [], None
    for line, text in sorted(comments.items()):
        if STEP_COMMENT.match(text):
            kept.append("# TODO " + text[1:].strip())
            previous = line
        elif previous == line - 1 and re.match(r"#\s{2,}\S", text):
            kept.append(text)
            previous = line
        else:
            previous = None
    return kept


def spoken_list(items: list[str]) -> str:
    """["1.1", "1.3", "1.4"] -> "1.1, 1.3 and 1.4"."""
    return " and ".join(filter(None, [", ".join(items[:-1]), *items[-1:]]))


def stub_message(marker: str, qualname: str) -> str:
    """The NotImplementedError message of a stub: the task, the function and the tasks that need it.

    For example "task1_5: implement DraftTree.extend (see its docstring); tasks 1.1, 1.3 and 1.4
    need it first" (from `Task.requires`); a task nothing needs gets no second part.
    """
    message = f"{marker}: implement {qualname} (see its docstring)"
    needing = [task.number for task in dependents(marker)]
    if len(needing) == 1:
        message += f"; task {needing[0]} needs it first"
    elif needing:
        message += f"; tasks {spoken_list(needing)} need it first"
    return message


def library_stub_message(task: Task, qualname: str) -> str:
    """The NotImplementedError message of a library copy of `task` (`Task.library_copies`)."""
    return f"{task.marker}: {qualname} does the job of task {task.number}, so this copy leaves it out (not part of your work)"


def stub_source(source: str, marker: str, functions: tuple[str, ...], message=stub_message) -> str:
    """`source` with the bodies of `functions` replaced by their step comments and a NotImplementedError.

    Args:
        source: a module's text.
        marker: the task marker named in the error message.
        functions: qualified names of the functions to empty.
        message: the error's text, ``message(marker, qualname)`` (default `stub_message`).

    Returns:
        The new text; signatures, decorators and docstrings are kept verbatim, and so are the
        body's numbered step comments (``# 1. ...``), as ``# TODO 1. ...``.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cuts = []
    for qualname in functions:
        func = find_function(tree, qualname)
        start, end = docstring_end(func, qualname), func.end_lineno  # body = lines start+1 .. end
        indent = " " * func.body[1].col_offset
        todos = [f"{indent}{text}\n" for text in step_comments(lines, start, end)]
        stub = f'{indent}raise NotImplementedError("{message(marker, qualname)}")\n'
        cuts.append((start, end, [*todos, stub]))
    for start, end, stub in sorted(cuts, reverse=True):  # bottom-up keeps line numbers valid
        lines[start:end] = stub
    new = "".join(lines)
    check_stubbed(new, functions)
    return new


def check_stubbed(source: str, functions: tuple[str, ...]) -> None:
    """Assert that each function of `source` is now docstring + one raise."""
    tree = ast.parse(source)
    for qualname in functions:
        body = find_function(tree, qualname).body
        if len(body) != 2 or not isinstance(body[1], ast.Raise):
            raise AssertionError(f"stubbing {qualname} left {len(body)} statements")


def local_imports(path: Path) -> set[str]:
    """Names of the modules `path` imports that live next to it (tests/strategies.py and the like)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return {name for name in names if (path.parent / f"{name}.py").is_file()}


def public_tests(tests: Path, markers: list[str] | None = None) -> list[Path]:
    """The test files a student copy ships: those carrying one of `markers` (default: any task's), and
    what they import.

    The rule keeps out every test of something other than the tasks (the docs, the tutorials,
    the benchmarks, the LADE peer, this generator), so nothing in the copy needs a file it lacks.
    """
    markers = [t.marker for t in TASKS] if markers is None else markers
    shipped = set(marked_files(tests, markers)) | {tests / "conftest.py"}
    todo = list(shipped)
    while todo:
        for name in local_imports(todo.pop()):
            helper = tests / f"{name}.py"
            if helper not in shipped:
                shipped.add(helper)
                todo.append(helper)
    return sorted(shipped)


def public_data(tests: Path, shipped: list[Path]) -> list[Path]:
    """The files of ``tests/data/`` that a shipped test reads: those whose name appears in its text."""
    texts = [path.read_text() for path in shipped]
    return [path for path in sorted((tests / "data").glob("*")) if path.is_file() and any(path.name in t for t in texts)]


def pinned_pyproject(text: str) -> str:
    """The project file with pytest told to import from the folder itself (``pythonpath = ["."]``)."""
    header = "[tool.pytest.ini_options]\n"
    if header not in text:
        raise ValueError("pyproject.toml has no [tool.pytest.ini_options] table")
    pin = '# import this folder\'s ladref, never an installed one (conftest.py checks it)\npythonpath = ["."]\n'
    return text.replace(header, header + pin, 1)


def reading_and_tutorials(copy_plan: CopyPlan) -> list[str]:
    """The files, relative to the repository, that a student copy ships to read and to run: the pages of
    `READING`, the tutorials it may show (`overview.shipped_tutorials`) with ``tutorials/run.py``, and
    the files those tutorials read (``tutorial_needs.json``; never one under ``assignments/``)."""
    names, needs = shipped_tutorials(copy_plan.past, copy_plan.doable), load_needs()
    reads = sorted({path for name in names for path in needs[name]["reads"] if not path.startswith("assignments/")})
    return [*READING, *(f"tutorials/{name}.py" for name in names), *(["tutorials/run.py"] if names else []), *reads]


def place_course_answers(out: Path) -> None:
    """Write each course answer the library does not hold (`tasks.course_answers`) at its task's file in the
    copy's package, the reference's code whole (`stub_tasks` then stubs it unless the copy ships it solved)."""
    for module, reference in course_answers().items():
        if (out / module).exists():
            raise FileExistsError(f"the library holds {module}, the file of a course answer kept in {reference}")
        shutil.copy2(REPO / reference, out / module)


def stub_tasks(out: Path, copy_plan: CopyPlan) -> None:
    """Stub every task the copy does not ship solved, and the library copies (`Task.library_copies`) of
    those whose assignment is not over (`CopyPlan.library_stubs`)."""
    for task in copy_plan.stubbed:
        path = out / task.module
        path.write_text(stub_source(path.read_text(), task.marker, task.functions))
    for task, module, functions in copy_plan.library_stubs():
        path = out / module
        message = lambda _, name, task=task: library_stub_message(task, name)  # noqa: E731
        path.write_text(stub_source(path.read_text(), task.marker, functions, message))


def copy_tests(out: Path, markers: list[str]) -> None:
    """The public tests of the tasks `markers`, their helpers and the data files they read."""
    (out / "tests").mkdir(parents=True)
    shipped = public_tests(REPO / "tests", markers)
    for path in shipped:
        shutil.copy2(path, out / "tests" / path.name)
    for path in public_data(REPO / "tests", shipped):
        (out / "tests" / "data").mkdir(exist_ok=True)
        shutil.copy2(path, out / "tests" / "data" / path.name)


def copy_table(work: tuple[Task, ...]) -> str:
    """The copy's ``assignments/tasks.py``: the table, its `TASKS` narrowed to the tasks released (the self-check's)."""
    kept = tuple(task.marker for task in work)
    return ((HERE / "tasks.py").read_text() + "\n\n# This copy's tasks (written by make_student.py): the others are not "
            f"part of it.\nTASKS = tuple(task for task in TASKS if task.marker in {kept!r})\n")


def make_student(out: Path, markers: list[str] | None = None, *, assignment: int | None = None,
                 solved: list[str] | tuple[str, ...] = ()) -> CopyPlan:
    """Write the student version into `out` (which must not exist yet).

    Args:
        out: destination folder.
        markers: the tasks released as work (`copy_plan.plan`); None with no `assignment`: all of them.
        assignment: release this assignment's tasks as work instead.
        solved: tasks (markers or assignment numbers) whose reference code the copy ships.

    Returns:
        The copy's `CopyPlan`.
    """
    copy_plan = plan(assignment, markers, solved)
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new folder")
    shutil.copytree(REPO / "ladref", out / "ladref", ignore=IGNORED)
    place_course_answers(out)
    copy_tests(out, [task.marker for task in copy_plan.work])
    for name in COPIED_FILES:
        shutil.copy2(REPO / name, out / name)
    (out / "pyproject.toml").write_text(pinned_pyproject((out / "pyproject.toml").read_text()))
    (out / "conftest.py").write_text(conftest_source())
    (out / "assignments").mkdir()
    for name in ASSIGNMENT_FILES:
        shutil.copy2(HERE / name, out / "assignments" / name)
    (out / "assignments" / "tasks.py").write_text(copy_table(copy_plan.work))
    stub_tasks(out, copy_plan)
    (out / "handouts").mkdir()
    (out / "answers").mkdir()
    for task in copy_plan.work:
        (out / "handouts" / f"{task.marker}.md").write_text(render_handout(task, tests=out / "tests"))
        (out / answers_file(task)).write_text(answers_template(task))
    for relative in reading_and_tutorials(copy_plan):
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, out / relative)
    (out / "README.md").write_text(student_readme(copy_plan))
    return copy_plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--assignment", type=int, metavar="N", help="release assignment N's tasks as work")
    chosen.add_argument("--tasks", nargs="+", metavar="MARKER", help="release these tasks as work")
    parser.add_argument("--solved", nargs="+", default=[], metavar="N|MARKER",
                        help="ship these tasks (an assignment's number, or markers) with the reference's code")
    args = parser.parse_args(argv)
    try:
        copy_plan = make_student(args.out, args.tasks, assignment=args.assignment, solved=args.solved)
    except (ValueError, TypeError, FileExistsError) as err:
        parser.error(str(err))
    for task in TASKS:
        state = "work" if task in copy_plan.work else "solved" if task in copy_plan.solved else "stub, not released"
        print(f"{task.marker}: {state} ({', '.join(task.functions)} in {task.module})")
    print(f"student version written to {args.out} (start with its README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
