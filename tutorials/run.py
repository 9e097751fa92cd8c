"""Execute the tutorials into notebooks with their outputs.

    python tutorials/run.py                 # every tutorial -> build/tutorials/NN_name.ipynb
    python tutorials/run.py 03 05           # the tutorials whose names start with 03 or 05
    python tutorials/run.py --out DIR       # somewhere else

Each source ``tutorials/NN_name.py`` (jupytext percent format) is converted to a notebook,
executed top to bottom in a fresh ``python3`` kernel (the current interpreter's ipykernel), with
``tutorials/`` as the working directory, and written with its outputs. The notebook's metadata
records the source's SHA-256 (``metadata.ladref.source_sha256``), which the docs build
(``tutorials/mkdocs_hook.py``) uses to show only outputs of the current source; the build calls
`execute` itself for a tutorial whose notebook is missing or stale. An error in any cell stops
that tutorial and makes the command exit non-zero.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "build" / "tutorials"


def tutorial_sources(prefixes: list[str] | None = None) -> list[Path]:
    """The tutorial sources, in order; only those whose name starts with one of `prefixes` if given."""
    sources = sorted(HERE.glob("[0-9][0-9]_*.py"))
    if prefixes:
        sources = [s for s in sources if any(s.name.startswith(p) for p in prefixes)]
    return sources


def execute(source: Path, out_dir: Path, timeout: int = 600):
    """Run one tutorial and write ``out_dir/<stem>.ipynb``.

    Args:
        source: a ``tutorials/NN_name.py`` file.
        out_dir: where to write the executed notebook (created if needed).
        timeout: seconds allowed per cell.

    Returns:
        The executed `nbformat.NotebookNode` (also written to disk).

    Raises:
        nbclient.exceptions.CellExecutionError: when a cell fails.
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(source.parent)}}).execute()
    nb.metadata["ladref"] = {
        "source": source.name,
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        "seconds": round(time.perf_counter() - start, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / f"{source.stem}.ipynb")
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute the tutorials into notebooks with outputs.")
    parser.add_argument("prefixes", nargs="*", help="run only tutorials whose file name starts with one of these")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    sources = tutorial_sources(args.prefixes)
    if not sources:
        print("no tutorial matches", file=sys.stderr)
        return 2
    failed = []
    for source in sources:
        start = time.perf_counter()
        try:
            execute(source, args.out)
            print(f"{source.name}: ok in {time.perf_counter() - start:.0f} s")
        except Exception as err:  # report every tutorial, then fail
            failed.append(source.name)
            print(f"{source.name}: FAILED after {time.perf_counter() - start:.0f} s\n{err}", file=sys.stderr)
    print(f"executed notebooks in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
