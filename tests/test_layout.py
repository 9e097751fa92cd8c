"""The package's shape: a core a student reads, a bench package a student runs.

The library (every module of ``ladref/`` but ``ladref/bench/``) never imports ``ladref.bench``;
its modules import each other without a cycle, lazy imports included, and so do its rooms (the
core, ``sources``, ``pricing``, ``batched``, ``decoders``, ``fast``); only ``ladref/hf_internals.py``
touches transformers' internals, and the few other modules that import transformers at all take
the public names of an explicit list.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the modules the reading map names (__main__ only forwards to the CLI)
CORE = sorted(p for room in ("", "sources", "decoders", "pricing", "fast") for p in (ROOT / "ladref" / room).glob("*.py")
              if p.stem != "__main__")


def dotted(path: Path) -> str:
    """ladref/sources/jacobi.py -> ladref.sources.jacobi (a package's __init__: the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_architecture():
    """scripts/architecture.py, the page's generator, as a module: its `imports` reads a file's imports."""
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "scripts" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARCHITECTURE = load_architecture()
imports = ARCHITECTURE.imports  # absolute names of what a file imports, anywhere in it (relative ones resolved)
ROOMS = ARCHITECTURE.ROOMS  # the rooms, in the order they may import each other (a room imports only rooms before it)
room = ARCHITECTURE.room  # "ladref.batched.sources.pool" -> "batched", "ladref.step" -> "" (the core)
module_graph = ARCHITECTURE.library_graph  # {library module: the library modules it imports, lazy imports too}
LIBRARY = sorted(ARCHITECTURE.modules().values())  # every library module: the reading map's and the batched engine's


def test_importing_the_core_loads_no_bench_module():
    code = ("import sys, ladref; " + "; ".join(f"import {dotted(p)}" for p in CORE)
            + "; print(sorted(m for m in sys.modules if m.startswith('ladref.bench')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


BLOCKS = ("ladref.tree", "ladref.masks", "ladref.verify", "ladref.sources.ngram_pool")  # course tasks 1.1-1.3, 1.5


def test_a_building_block_imports_without_transformers_and_every_public_name_resolves():
    """``import ladref`` imports no decoder: each public name's module is imported on first use, so
    a building block costs torch's import alone (the autograder imports one per task)."""
    code = (f"import sys; import {', '.join(BLOCKS)}; print('transformers' in sys.modules)\n"
            "import ladref; names = [getattr(ladref, n) for n in ladref.__all__]; print('transformers' in sys.modules)\n"
            "print(sorted(set(ladref.__all__) - set(dir(ladref))), ladref.lookahead_decode.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split("\n")
    assert out[:3] == ["False", "True", "[] ladref.decoders.methods"], out
    import ladref

    with pytest.raises(AttributeError, match="no attribute 'lookahead_decoder'"):
        ladref.lookahead_decoder  # noqa: B018 - a misspelt name fails as any missing attribute does
    with pytest.raises(ImportError, match="cannot import name"):
        exec("from ladref import LookAheadConfig")  # noqa: S102


def test_every_public_name_is_an_explicit_re_export():
    """The ``if TYPE_CHECKING:`` imports name each public name ``x as x``: ``__all__`` is computed,
    and a type checker that reads no computed ``__all__`` (mypy --strict) takes only that form as
    exported (PEP 484)."""
    tree = ast.parse((ROOT / "ladref" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    plain = [alias.name for node in block.body for alias in node.names if alias.asname != alias.name]
    assert not plain, f"write these as `x as x`: {plain}"


def test_no_core_module_imports_bench_even_lazily():
    offenders = {p.name: sorted(n for n in imports(p) if n.startswith("ladref.bench")) for p in LIBRARY}
    assert not {k: v for k, v in offenders.items() if v}


def test_nothing_at_the_top_imports_the_fast_paths():
    """The core and its plumbing read without `ladref.fast` (the package's __init__ only re-exports)."""
    top = [p for p in CORE if p.parent.name == "ladref" and p.stem != "__init__"]
    offenders = {p.name: sorted(n for n in imports(p) if n.startswith("ladref.fast")) for p in top}
    assert not {k: v for k, v in offenders.items() if v}


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` ({node: the nodes it imports}) as a path, or None (depth-first search)."""
    visiting, done = [], set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return visiting[visiting.index(node):] + [node]
        if node in done:
            return None
        visiting.append(node)
        for child in sorted(graph.get(node, ())):
            if found := visit(child):
                return found
        visiting.pop()
        done.add(node)
        return None

    return next((found for node in sorted(graph) if (found := visit(node))), None)


def test_the_library_import_graph_has_no_cycle_even_through_lazy_imports():
    graph = module_graph()
    graph = {m: {n for n in targets if not n.startswith(m + ".")} for m, targets in graph.items()}  # a package's own submodules
    assert first_cycle(graph) is None, f"import cycle: {' -> '.join(first_cycle(graph))}"
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search finds one


def test_each_room_imports_only_the_rooms_before_it():
    order = list(ROOMS)
    for module, targets in module_graph().items():
        if module == "ladref":
            continue  # the package's __init__ only re-exports, each name imported on first use
        for target in targets:
            if target == "ladref":
                continue
            mine, theirs = order.index(room(module)), order.index(room(target))
            assert theirs <= mine, f"{module} ({ROOMS[room(module)]}) imports {target} ({ROOMS[room(target)]})"


INTERNALS = "ladref.hf_internals"  # the one library module that may import anything of transformers
# what any other library module may take from transformers: public names, each module's own
PUBLIC_TRANSFORMERS = {
    "ladref.models": {"transformers.AutoModelForCausalLM", "transformers.AutoTokenizer"},  # loading a model
    "ladref.minimal": {"transformers.DynamicCache"},  # the one-file teaching reference keeps its cache in plain sight
    "ladref.decoders.generate": {"transformers.generation.GenerateDecoderOnlyOutput",  # what generate() returns
                                 "transformers.generation.EosTokenCriteria", "transformers.generation.MaxLengthCriteria"},  # its stops
    "ladref.fast.package_record": {"transformers"},  # transformers.__version__, recorded beside a compiled package
}


def transformers_imports(source: str) -> set[str]:
    """What `source` takes from transformers, anywhere in it (inside functions and ``if`` blocks too):
    ``import transformers.x`` -> ``transformers.x``; ``from transformers.x import y`` -> ``transformers.x.y``."""
    taken = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            taken |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            taken |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in taken if name == "transformers" or name.startswith("transformers.")}


def test_only_the_internals_module_touches_transformers_and_the_others_take_listed_public_names():
    probe = ("import torch\nimport transformers\nfrom .hf_internals import new_cache\n"
             "def f():\n    if True:\n        from transformers.cache_utils import DynamicLayer as L\n")
    assert transformers_imports(probe) == {"transformers", "transformers.cache_utils.DynamicLayer"}  # lazy ones found
    found = ARCHITECTURE.modules()
    assert INTERNALS in found and transformers_imports(found[INTERNALS].read_text())
    for module, path in found.items():
        if module == INTERNALS:
            continue
        taken, allowed = transformers_imports(path.read_text()), PUBLIC_TRANSFORMERS.get(module, set())
        assert taken <= allowed, f"{module} imports {sorted(taken - allowed)} from transformers: go through {INTERNALS}"
        assert allowed <= taken, f"{module} no longer imports {sorted(allowed - taken)}: drop it from PUBLIC_TRANSFORMERS"


def test_the_rooms_hold_what_their_docstrings_say():
    """`ls ladref/` shows the rooms: each subpackage's docstring names every module in it, and the
    package's reading map names every module of the library."""
    import ladref

    for name in ("sources", "pricing", "decoders", "fast"):
        doc = (ROOT / "ladref" / name / "__init__.py").read_text()
        for path in (ROOT / "ladref" / name).glob("*.py"):
            assert path.stem == "__init__" or f"`{path.stem}`" in doc, f"ladref/{name}/__init__.py leaves out {path.stem}"
    for path in CORE:
        assert path.stem in ("__init__", "__main__") or f"`{dotted(path)}`" in ladref.__doc__, f"the reading map leaves out {dotted(path)}"



def test_the_architecture_page_is_what_the_code_gives():
    """docs/architecture.md (the rooms, their modules and imports) is generated from the sources."""
    run = subprocess.run([sys.executable, "scripts/architecture.py", "--check"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr


@pytest.mark.slow
def test_the_wheel_ships_py_typed_and_the_benchmark_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("ladref-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ladref/py.typed", "ladref/bench/data/gsm8k/test.jsonl", "ladref/bench/cli.py"} <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "tutorials/")) for n in names)
