"""Which course tasks each tutorial runs, and which repository files it reads: ``tutorial_needs.json``.

    python assignments/tutorial_needs.py            # trace every tutorial, rewrite the file
    python assignments/tutorial_needs.py 05 09      # only these (their entries replaced)

Each tutorial runs as a script (its code cells in order, in a fresh process, from ``tutorials/``)
with every task function of `tasks.TASKS` wrapped to record its calls, and an audit hook recording
the files it opens in the repository outside ``ladref/`` and ``tutorials/``. A tutorial that calls
a task's function stops with that task's NotImplementedError in a student copy until the task is
done. `make_student.py` ships the tutorials no task holds back (`Task.solution_tutorials`), with the
files they read, and the student README says which tasks each one needs; the instructor README's
tables come from the same file. Run it again when a tutorial or a task's function list changes.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NEEDS = HERE / "tutorial_needs.json"
sys.path.insert(0, str(HERE))

from tasks import TASKS  # noqa: E402


def load_needs() -> dict[str, dict]:
    """Tutorial name -> {"tasks": markers it calls, "reads": repository files it opens}."""
    return json.loads(NEEDS.read_text()) if NEEDS.is_file() else {}


def recorder(calls: set[str], marker: str, function):
    """`function` wrapped to add `marker` to `calls` whenever it runs."""
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        calls.add(marker)
        return function(*args, **kwargs)
    return wrapped


def wrap_task_functions(calls: set[str]) -> None:
    """Wrap every task function, and the library functions stubbed with it (`Task.library_copies`),
    where ladref's modules look it up (methods on their class). A course answer the library does not
    hold (`Task.reference`) is not there for a tutorial to run: only its library copies are wrapped."""
    import ladref

    for info in pkgutil.walk_packages(ladref.__path__, "ladref."):
        importlib.import_module(info.name)
    modules = [m for name, m in sys.modules.items() if name == "ladref" or name.startswith("ladref.")]
    for task in TASKS:
        own = {} if task.reference else {task.module: task.functions}
        for path, functions in {**own, **task.library_functions()}.items():
            wrap_functions(calls, task.marker, importlib.import_module(path.removesuffix(".py").replace("/", ".")), functions, modules)


def wrap_functions(calls: set[str], marker: str, module, functions: tuple[str, ...], modules: list) -> None:
    """Wrap `functions` of `module` (a task's, or its library copies, which a copy stubs with it) to
    record `marker`: methods on their class, functions wherever ladref's `modules` look them up."""
    for qualname in functions:
        *owner, name = qualname.split(".")
        if owner:
            cls = getattr(module, owner[0])
            setattr(cls, name, recorder(calls, marker, cls.__dict__[name]))
            continue
        original = getattr(module, name)
        for other in modules:
            for attr, value in list(vars(other).items()):
                if value is original:
                    setattr(other, attr, recorder(calls, marker, original))


def trace(source: Path) -> dict:
    """Run the tutorial `source` here; what it called and read (raises if a cell fails)."""
    import jupytext

    calls, reads = set(), set()
    wrap_task_functions(calls)
    skip = (REPO / "ladref", REPO / "tutorials")

    def audit(event, args):
        if event == "open" and isinstance(args[0], str) and (args[1] in (None, "r", "rb") or args[1].startswith("r")):
            path = Path(args[0]).resolve()
            if path.is_relative_to(REPO) and not any(path.is_relative_to(s) for s in skip) and path.suffix != ".pyc":
                reads.add(path.relative_to(REPO).as_posix())

    os.environ.setdefault("MPLBACKEND", "Agg")
    cells = [c.source for c in jupytext.read(source).cells if c.cell_type == "code"]
    os.chdir(source.parent)
    sys.addaudithook(audit)
    namespace = {"__name__": "__main__"}
    for i, cell in enumerate(cells):
        exec(compile(cell, f"{source.name} (cell {i})", "exec"), namespace)  # noqa: S102 - the repository's own tutorials
    return {"tasks": sorted(calls), "reads": sorted(r for r in reads if (REPO / r).is_file())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", help="only the tutorials whose names start with these")
    parser.add_argument("--trace", type=Path, help=argparse.SUPPRESS)  # one tutorial, in this process
    args = parser.parse_args(argv)
    if args.trace is not None:
        print(json.dumps(trace(args.trace.resolve())))
        return 0
    sources = [p for p in sorted((REPO / "tutorials").glob("[0-9][0-9]_*.py"))
               if not args.prefixes or any(p.name.startswith(x) for x in args.prefixes)]
    needs = load_needs() if args.prefixes else {}
    for source in sources:
        proc = subprocess.run([sys.executable, __file__, "--trace", str(source)], capture_output=True, text=True)
        if proc.returncode:
            print(f"{source.name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        needs[source.stem] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{source.stem}: tasks {', '.join(needs[source.stem]['tasks']) or 'none'}", flush=True)
        NEEDS.write_text(json.dumps(dict(sorted(needs.items())), indent=1) + "\n")  # kept if a later one fails
    return 0


if __name__ == "__main__":
    sys.exit(main())
