"""Build the Gradescope autograder: a zip of the reference and the two scripts Gradescope runs.

    python assignments/make_gradescope.py OUT.zip [--tasks task1_2 task1_3] [--force]

Upload OUT.zip as the assignment's autograder ("Zip file upload"). Gradescope unpacks it into
``/autograder/source`` and runs ``setup.sh`` there once, as root, to build the image; then, for
each submission, it runs ``run_autograder`` (copied to ``/autograder/run_autograder``) with the
submitted files in ``/autograder/submission`` and reads ``/autograder/results/results.json``.
The zip's top level holds:

    setup.sh, run_autograder   from assignments/gradescope/ (see their headers)
    ladref/                    the reference package
    assignments/               the autograder, the task table and the hidden tests
    tests/                     the public tests (the files carrying a task marker), the helpers
                               they import, tests/conftest.py and tests/data/
    README.md, pyproject.toml, constraints.txt   what ``pip install -e`` and the pins need

without caches (``__pycache__``, ``*.pyc``, ``.hypothesis``) and without the docs, tutorials or
benchmarks. ``--tasks`` grades only those tasks: the markers go into
``assignments/gradescope_tasks.txt``, which ``run_autograder`` passes to the grader (without the
option every task is graded). Entries are written in a fixed order with fixed dates and modes
(the scripts executable), so the same reference always gives the same zip.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_student import public_tests  # noqa: E402
from tasks import task_by_marker  # noqa: E402

REPO = HERE.parent
TEMPLATES = HERE / "gradescope"
SCRIPTS = ("setup.sh", "run_autograder")
TOP_FILES = ("README.md", "pyproject.toml", "constraints.txt")
TASKS_FILE = "assignments/gradescope_tasks.txt"
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
    for needed in ("ladref/__init__.py", "assignments/autograde.py", "assignments/hidden", "tests/conftest.py", *TOP_FILES):
        if not (repo / needed).exists():
            raise FileNotFoundError(f"{repo / needed} is missing; the autograder needs it")
    assignments = repo / "assignments"
    skip = (assignments / "gradescope", assignments / Path(TASKS_FILE).name)  # the scripts go to the top
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


def make_gradescope(out: Path, markers: list[str] | None = None, *, force: bool = False) -> list[str]:
    """Write the autograder zip `out`.

    Args:
        out: the zip to write; its name must end in ``.zip``.
        markers: tasks to grade (written to ``assignments/gradescope_tasks.txt``); None grades all.
        force: replace `out` if it exists.

    Returns:
        The names written, in zip order.

    Raises:
        ValueError: a name not ending in .zip, an unknown task, an empty task list.
        FileExistsError: `out` exists and `force` is False.
        FileNotFoundError: the folder of `out` does not exist, or the reference lacks a part.
    """
    if out.suffix.lower() != ".zip":
        raise ValueError(f"{out}: the autograder must be a .zip file")
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent} is not a folder")
    if markers is not None:
        if not markers:
            raise ValueError("--tasks needs at least one task marker")
        markers = [task_by_marker(m).marker for m in dict.fromkeys(markers)]  # checked, duplicates dropped
    contents = {name: path.read_bytes() for name, path in reference_files().items()}
    if markers is not None:
        contents[TASKS_FILE] = ("\n".join(markers) + "\n").encode()
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


def describe(names: list[str]) -> list[str]:
    """One line per top-level entry of the zip: files shown by name, folders with their file count."""
    counts: dict[str, int] = {}
    for name in names:
        top = name.split("/")[0] + ("/" if "/" in name else "")
        counts[top] = counts.get(top, 0) + 1
    return [f"  {top} ({n} files)" if top.endswith("/") else f"  {top}" for top, n in counts.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the zip to write (OUT.zip)")
    parser.add_argument("--tasks", nargs="+", metavar="MARKER", help="grade only these tasks (default: all)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = parser.parse_args(argv)
    try:
        names = make_gradescope(args.out, args.tasks, force=args.force)
    except (ValueError, FileExistsError, FileNotFoundError) as err:
        parser.error(str(err))
    print(f"wrote {args.out}: {len(names)} files, {args.out.stat().st_size / 1024:.0f} KiB")
    print("\n".join(describe(names)))
    print(f"tasks graded: {' '.join(dict.fromkeys(args.tasks)) if args.tasks else 'all'}")
    print("upload it as the assignment's autograder (Gradescope: Configure Autograder, Zip file upload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
