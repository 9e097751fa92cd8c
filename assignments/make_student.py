"""Generate the student version of the course from the reference implementation.

    python assignments/make_student.py OUT [--tasks task1_1 task1_3]

OUT receives a self-contained copy of the project in which the functions of the chosen tasks
(all tasks by default, see `tasks.py`) keep their signature and docstring but have their body
replaced by ``raise NotImplementedError("task1_k: ...")``:

    OUT/ladref/        the package, with the chosen bodies removed
    OUT/tests/         the library's own tests (the autograder's tests; not those of the docs,
                       tutorials and this generator)
    OUT/pyproject.toml the project file (pytest markers and options)
    OUT/assignments/   the autograder and the task table
    OUT/ASSIGNMENT.md  what to implement and how to check it

Nothing is hand-copied: bodies are located with `ast` in the reference sources, so the student
version always matches the current reference.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import TASKS, Task, task_by_marker  # noqa: E402

REPO = HERE.parent
COPIED_FILES = ("pyproject.toml",)
ASSIGNMENT_FILES = ("autograde.py", "grading_plugin.py", "tasks.py", "README.md")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
# tests of the course material itself (site, README, tutorials, this generator), not of the library
NOT_LIBRARY_TESTS = shutil.ignore_patterns("__pycache__", "*.pyc", "test_assignments.py", "test_docs.py", "test_readme.py",
                                       "test_tutorials.py")


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


def stub_source(source: str, marker: str, functions: tuple[str, ...]) -> str:
    """`source` with the bodies of `functions` replaced by a NotImplementedError.

    Args:
        source: a module's text.
        marker: the task marker named in the error message.
        functions: qualified names of the functions to empty.

    Returns:
        The new text; signatures, decorators and docstrings are kept verbatim.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cuts = []
    for qualname in functions:
        func = find_function(tree, qualname)
        start, end = docstring_end(func, qualname), func.end_lineno  # body = lines start+1 .. end
        indent = " " * func.body[1].col_offset
        stub = f'{indent}raise NotImplementedError("{marker}: implement {qualname} (see its docstring)")\n'
        cuts.append((start, end, stub))
    for start, end, stub in sorted(cuts, reverse=True):  # bottom-up keeps line numbers valid
        lines[start:end] = [stub]
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


def assignment_text(tasks: list[Task]) -> str:
    """The OUT/ASSIGNMENT.md handed to students."""
    parts = [
        "# ladref assignment\n",
        "Implement the functions below. Each keeps its signature and docstring; its body raises",
        "`NotImplementedError` until you write it. Read the module docstring first, then the",
        "function's docstring: together they specify the behaviour.\n",
        "Grade yourself from this folder (the folder that holds `ladref/`):\n",
        "    python assignments/autograde.py            # every task",
        "    python assignments/autograde.py task1_2    # one task\n",
        "or run one task's tests directly: `python -m pytest -m task1_2`.\n",
    ]
    for task in tasks:
        parts.append(f"## {task.marker}: {task.title}\n")
        parts.append(f"File: `{task.module}`\n")
        parts.extend(f"- `{name}`" for name in task.functions)
        if task.requires:
            parts.append(f"\nIts tests also run the code of {', '.join(task.requires)}: finish those first.")
        parts.append("")
    return "\n".join(parts) + "\n"


def make_student(out: Path, markers: list[str] | None = None) -> list[Task]:
    """Write the student version into `out` (which must not exist yet).

    Args:
        out: destination folder.
        markers: tasks whose functions are removed; None means all of them.

    Returns:
        The tasks removed.
    """
    tasks = list(TASKS) if markers is None else [task_by_marker(m) for m in markers]
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new folder")
    shutil.copytree(REPO / "ladref", out / "ladref", ignore=IGNORED)
    shutil.copytree(REPO / "tests", out / "tests", ignore=NOT_LIBRARY_TESTS)
    for name in COPIED_FILES:
        shutil.copy2(REPO / name, out / name)
    (out / "assignments").mkdir()
    for name in ASSIGNMENT_FILES:
        shutil.copy2(HERE / name, out / "assignments" / name)
    for task in tasks:
        path = out / task.module
        path.write_text(stub_source(path.read_text(), task.marker, task.functions))
    (out / "ASSIGNMENT.md").write_text(assignment_text(tasks))
    return tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create")
    parser.add_argument("--tasks", nargs="+", metavar="MARKER", help="tasks to remove (default: all)")
    args = parser.parse_args(argv)
    tasks = make_student(args.out, args.tasks)
    for task in tasks:
        print(f"{task.marker}: removed {', '.join(task.functions)} from {task.module}")
    print(f"student version written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
