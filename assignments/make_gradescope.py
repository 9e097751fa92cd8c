"""Build the Gradescope autograders: a zip per assignment, of the reference and the two scripts Gradescope runs.

    python assignments/make_gradescope.py OUTDIR [--force]          # OUTDIR/assignment1.zip, assignment2.zip
    python assignments/make_gradescope.py OUT.zip --assignment 2    # one assignment's
    python assignments/make_gradescope.py OUT.zip --tasks task1_2   # some tasks only

Upload OUT.zip as the assignment's autograder ("Zip file upload"). Gradescope unpacks it into
``/autograder/source`` and runs ``setup.sh`` there once, as root, to build the image; then, for
each submission, it runs ``run_autograder`` (copied to ``/autograder/run_autograder``) with the
submitted files in ``/autograder/submission`` and reads ``/autograder/results/results.json``.
The zip's top level holds:

    setup.sh, run_autograder   from assignments/gradescope/ (see their headers)
    ladref/                    the reference package
    assignments/               the autograder, the task table, the hidden tests and the course answers
                               the library does not hold (``assignments/reference/``: the grader
                               puts them in its packages, `tasks.Task.reference`)
    tests/                     the public tests (the files carrying a task marker), the helpers
                               they import, tests/conftest.py and tests/data/
    README.md, pyproject.toml, constraints.txt   what ``pip install -e`` and the pins need

without caches (``__pycache__``, ``*.pyc``, ``.hypothesis``) and without the docs, tutorials or
benchmarks. A zip grades one assignment's tasks (or those of ``--tasks``): the markers go into
``assignments/gradescope_tasks.txt``, and the grading budget, `budget_for` (each task's time
limit times the tasks graded, so that a submission looping in every task still has every task
graded), into ``assignments/gradescope_budget.txt``; ``run_autograder`` passes both to the grader.
A zip whose budget, with the reference's own run, would not fit ``run_autograder``'s limit is
refused when it is built. Entries are written in a fixed order with fixed dates and modes (the
scripts executable), so the same reference always gives the same zip.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from autograde import TASK_TIMEOUT_S  # noqa: E402
from make_student import public_tests  # noqa: E402
from tasks import assignment_numbers, course_answers, task_by_marker, tasks_of  # noqa: E402

REPO = HERE.parent
TEMPLATES = HERE / "gradescope"
SCRIPTS = ("setup.sh", "run_autograder")
TOP_FILES = ("README.md", "pyproject.toml", "constraints.txt")
TASKS_FILE = "assignments/gradescope_tasks.txt"
BUDGET_FILE = "assignments/gradescope_budget.txt"
RUN_LIMIT_S = 1500  # run_autograder's LIMIT_S: the whole run, the reference's own run included
REFERENCE_RUN_S = 40  # allowance per task for the reference's run of its probes, before the submission's
SKIPPED_NAMES = {"__pycache__", ".hypothesis", ".pytest_cache", ".DS_Store"}
SKIPPED_SUFFIXES = {".pyc", ".pyo"}
DATE = (2020, 1, 1, 0, 0, 0)  # a fixed entry date: the zip depends on the files only
FILE_MODE, SCRIPT_MODE = 0o100644, 0o100755  # regular file with its permission bits


def tree_files(folder: Path, skip: tuple[Path, ...] = ()) -> list[Path]:
    """The files under `folder`, sorted, without caches and without the folders/files in `skip`."""
    found = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if not path.is_file() or SKIPPED_NAMES & set(parts) or path.suffix in SKIPPED_SUFFIXES:
            continue
        if any(path == s or s in path.parents for s in skip):
            continue
        found.append(path)
    return found


def reference_files(repo: Path = REPO) -> dict[str, Path]:
    """Zip name -> file of the reference that the autograder needs (see the module docstring).

    Raises:
        FileNotFoundError: when `repo` lacks a part the grader needs.
    """
    for needed in ("ladref/__init__.py", "assignments/autograde.py", "assignments/hidden", *course_answers().values(), "tests/conftest.py",
                   *TOP_FILES):
        if not (repo / needed).exists():
            raise FileNotFoundError(f"{repo / needed} is missing; the autograder needs it")
    assignments = repo / "assignments"
    skip = (assignments / "gradescope", assignments / Path(TASKS_FILE).name, assignments / Path(BUDGET_FILE).name)
    files = [*tree_files(repo / "ladref"), *tree_files(assignments, skip)]
    files += [*public_tests(repo / "tests"), *tree_files(repo / "tests" / "data")]
    files += [repo / name for name in TOP_FILES]
    return {path.relative_to(repo).as_posix(): path for path in files}


def entry(name: str, mode: int) -> zipfile.ZipInfo:
    """A zip entry with a fixed date, Unix permissions `mode` and compression."""
    info = zipfile.ZipInfo(name, date_time=DATE)
    info.create_system = 3  # Unix: unzip applies the permission bits of external_attr
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def script_text(name: str) -> bytes:
    """A template script with Unix line ends (a checkout may have turned them into CRLF)."""
    return (TEMPLATES / name).read_bytes().replace(b"\r\n", b"\n")


def budget_for(markers: list[str]) -> float:
    """The grading budget of a zip grading `markers`: the task time limit times their number.

    Raises:
        ValueError: with the reference's run (`REFERENCE_RUN_S` a task), it would not fit `RUN_LIMIT_S`.
    """
    budget = TASK_TIMEOUT_S * len(markers)
    needed = budget + REFERENCE_RUN_S * len(markers)
    if needed > RUN_LIMIT_S:
        raise ValueError(f"{len(markers)} tasks need {needed:g} s ({TASK_TIMEOUT_S:g} s each and {REFERENCE_RUN_S} s for the "
                         f"reference's run), more than run_autograder's {RUN_LIMIT_S} s limit: build a zip per assignment")
    return budget


def make_gradescope(out: Path, markers: list[str] | None = None, *, assignment: int | None = None, force: bool = False) -> list[str]:
    """Write the autograder zip `out` for one assignment, or for some tasks.

    Args:
        out: the zip to write; its name must end in ``.zip``.
        markers: tasks to grade (written to ``assignments/gradescope_tasks.txt``).
        assignment: grade this assignment's tasks (instead of `markers`); one of the two is needed.
        force: replace `out` if it exists.

    Returns:
        The names written, in zip order.

    Raises:
        ValueError: a name not ending in .zip, an unknown task or assignment, an empty task list,
            both or neither of `markers` and `assignment`, a budget past the run's limit (`budget_for`).
        FileExistsError: `out` exists and `force` is False.
        FileNotFoundError: the folder of `out` does not exist, or the reference lacks a part.
    """
    if out.suffix.lower() != ".zip":
        raise ValueError(f"{out}: the autograder must be a .zip file")
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent} is not a folder")
    if (markers is None) == (assignment is None):
        raise ValueError("a zip grades one assignment (--assignment N) or some tasks (--tasks ...): give exactly one")
    if assignment is not None:
        markers = [task.marker for task in tasks_of(assignment)]
    if not markers:
        raise ValueError("--tasks needs at least one task marker")
    markers = [task_by_marker(m).marker for m in dict.fromkeys(markers)]  # checked, duplicates dropped
    budget = budget_for(markers)
    contents = {name: path.read_bytes() for name, path in reference_files().items()}
    contents[TASKS_FILE] = ("\n".join(markers) + "\n").encode()
    contents[BUDGET_FILE] = f"{budget:g}\n".encode()
    part = out.with_name(out.name + ".part")  # written aside, so a failure leaves no half zip at `out`
    try:
        with zipfile.ZipFile(part, "w") as zf:
            for name in SCRIPTS:
                zf.writestr(entry(name, SCRIPT_MODE), script_text(name))
            for name, data in sorted(contents.items()):
                zf.writestr(entry(name, FILE_MODE), data)
            names = zf.namelist()
        part.replace(out)
    finally:
        part.unlink(missing_ok=True)
    return names


def make_all(folder: Path, *, force: bool = False) -> dict[Path, list[str]]:
    """One zip per assignment in `folder` (``assignment1.zip``, ...): zip -> the names written."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder (give OUT.zip with --assignment or --tasks for one zip)")
    return {folder / f"assignment{n}.zip": make_gradescope(folder / f"assignment{n}.zip", assignment=n, force=force)
            for n in assignment_numbers()}


def describe(names: list[str]) -> list[str]:
    """One line per top-level entry of the zip: files shown by name, folders with their file count."""
    counts: dict[str, int] = {}
    for name in names:
        top = name.split("/")[0] + ("/" if "/" in name else "")
        counts[top] = counts.get(top, 0) + 1
    return [f"  {top} ({n} files)" if top.endswith("/") else f"  {top}" for top, n in counts.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a folder for one zip per assignment, or OUT.zip with --assignment or --tasks")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--assignment", type=int, metavar="N", help="grade assignment N's tasks")
    chosen.add_argument("--tasks", nargs="+", metavar="MARKER", help="grade only these tasks")
    parser.add_argument("--force", action="store_true", help="replace the zips if they exist")
    args = parser.parse_args(argv)
    try:
        if args.assignment is None and args.tasks is None:
            written = make_all(args.out, force=args.force)
        else:
            written = {args.out: make_gradescope(args.out, args.tasks, assignment=args.assignment, force=args.force)}
    except (ValueError, TypeError, FileExistsError, FileNotFoundError) as err:
        parser.error(str(err))
    for out, names in written.items():
        with zipfile.ZipFile(out) as zf:
            graded = zf.read(TASKS_FILE).decode().split()
        print(f"wrote {out}: {len(names)} files, {out.stat().st_size / 1024:.0f} KiB")
        print("\n".join(describe(names)))
        print(f"tasks graded: {' '.join(graded)} (budget {budget_for(graded):g} s)")
    print("upload each as its assignment's autograder (Gradescope: Configure Autograder, Zip file upload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
