"""The package's shape: a core a student reads, a bench package a student runs.

The core (``ladref/*.py``) never imports ``ladref.bench``, its modules import each other without
a cycle, and only ``ladref/runner.py`` reaches past transformers' public namespaces.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = sorted(p for p in (ROOT / "ladref").glob("*.py") if p.stem != "__main__")  # __main__ only forwards to the CLI
PUBLIC_TRANSFORMERS = {"transformers", "transformers.generation"}


def imports(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports (anywhere in the file, relative ones resolved)."""
    package = "ladref" if path.parent.name == "ladref" else f"ladref.{path.parent.name}"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names if node.level}  # `from . import x`
    return names


def test_importing_the_core_loads_no_bench_module():
    code = ("import sys, ladref; " + "; ".join(f"import ladref.{p.stem}" for p in CORE if p.stem != "__init__")
            + "; print(sorted(m for m in sys.modules if m.startswith('ladref.bench')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_no_core_module_imports_bench_even_lazily():
    offenders = {p.name: sorted(n for n in imports(p) if n.startswith("ladref.bench")) for p in CORE}
    assert not {k: v for k, v in offenders.items() if v}


def test_core_import_graph_has_no_cycle():
    stems = {p.stem for p in CORE}
    graph = {p.stem: {n.split(".")[1] for n in imports(p) if n.startswith("ladref.") and n.split(".")[1] in stems} - {p.stem}
             for p in CORE if p.stem != "__init__"}
    visiting, done = set(), set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in visiting, f"import cycle: {' -> '.join(path + (node,))}"
        if node in done or node == "__init__":
            return
        visiting.add(node)
        for child in graph.get(node, ()):
            visit(child, path + (node,))
        visiting.discard(node)
        done.add(node)

    for node in graph:
        visit(node, ())


def test_only_the_runner_touches_transformers_internals():
    for path in CORE:
        used = {n for n in imports(path) if n == "transformers" or n.startswith("transformers.")}
        private = {n for n in used if n not in PUBLIC_TRANSFORMERS and n.rsplit(".", 1)[0] not in PUBLIC_TRANSFORMERS}
        assert path.stem == "runner" or not private, f"{path.name} imports {sorted(private)}"


@pytest.mark.slow
def test_the_wheel_ships_py_typed_and_the_benchmark_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("ladref-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ladref/py.typed", "ladref/bench/data/gsm8k/test.jsonl", "ladref/bench/cli.py"} <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "tutorials/")) for n in names)
