"""The documentation site: `mkdocs build --strict` passes and the pages say what the code does."""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))

for module in ("mkdocs", "material", "mkdocstrings", "mkdocs_jupyter"):
    pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[dev]')")


def nav_targets() -> list[str]:
    """Every page path named in mkdocs.yml's nav (read as text: the file also holds plugin options)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"([\w/.-]+\.(?:md|ipynb))\s*$", nav, flags=re.M)


def test_nav_lists_every_page_and_tutorial():
    targets = set(nav_targets())
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages <= targets, f"pages missing from the nav: {sorted(pages - targets)}"
    assert {f"tutorials/{t.stem}.ipynb" for t in TUTORIALS} <= targets
    assert targets - pages <= {f"tutorials/{t.stem}.ipynb" for t in TUTORIALS}, "nav names a missing page"


def test_nav_is_grouped_for_readers():
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    top = re.findall(r"^  - ([^:]+):", nav, flags=re.M)
    assert top == ["Overview", "Learn", "Use", "Reference", "Benchmarks"]
    assert "navigation.indexes" in text  # section index pages: no "Tutorials > Tutorials"


def test_user_facing_text_speaks_of_the_project_only():
    """No word about how the project is built or worked on (sessions, issues as work items)."""
    pattern = re.compile(r"\bsessions?\b|\bissue \d+|\bthe issues\b|\bGPU issues\b", re.I)
    paths = [*DOCS.rglob("*.md"), ROOT / "README.md", *ROOT.glob("benchmarks/**/*.md"), *ROOT.glob("assignments/**/*.md"),
             *TUTORIALS]
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in paths for m in pattern.finditer(p.read_text())]
    assert not offenders


def test_glossary_names_are_real():
    from ladref import LookaheadConfig

    glossary = (DOCS / "glossary.md").read_text()
    for symbol, field, reference, trt in (("W", "window_size", "WINDOW_SIZE", "max_window_size"),
                                          ("N", "ngram_size", "LEVEL", "max_ngram_size"),
                                          ("G", "max_candidates", "GUESS_SET_SIZE", "max_verification_set_size")):
        assert f"| {symbol} | `LookaheadConfig.{field}` | `{reference}` | `{trt}` |" in glossary
    from ladref.bench.hf import hf_prompt_lookup_decode

    for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):  # the wrapper keeps transformers' names
        assert name in inspect.signature(hf_prompt_lookup_decode).parameters and f"`{name}`" in glossary
    fields = {f.name for f in dataclasses.fields(LookaheadConfig)}
    for name in re.findall(r"`LookaheadConfig\.(\w+)", glossary):
        assert name in fields or hasattr(LookaheadConfig, name), name


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for tutorial in TUTORIALS:
        page = site / "tutorials" / tutorial.stem / "index.html"
        assert page.is_file(), f"no page for {tutorial.name}"
        assert "Exercises" in page.read_text()
        assert f'<a href="{tutorial.stem}.ipynb" download>' in page.read_text(), "no notebook download link"
        assert (page.parent / f"{tutorial.stem}.ipynb").is_file(), "the download link points at nothing"
    assert "GUESS_SET_SIZE" in (site / "glossary" / "index.html").read_text()
    api = (site / "reference" / "decoders" / "index.html").read_text()
    assert "lookahead_decode" in api and "compression" in api  # rendered from the docstrings
    assignments = (site / "assignments" / "index.html").read_text()
    assert "make_student.py" in assignments  # snippet included
    assert '<code class="nowrap">ladref/ngram_pool.py</code>' in assignments  # file names kept whole
    assert all(f"Task {t}" in assignments for t in ("1.1", "1.2", "1.3", "1.4", "1.5"))  # every handout
    assert 'class="arithmatex"' in (site / "concepts" / "index.html").read_text()  # math for MathJax
    assert "<!-- course-kit" not in assignments
    first = re.search(r'id="(ladref\.[\w.]+)"', api).group(1)
    assert first == "ladref.greedy.greedy_decode", f"the Decoders page opens with {first}"
    anchors = re.findall(r'id="(ladref\.[\w.]+)"', api)
    exported = [a for a in anchors if a in set(exported_names())]
    internal = [a for a in anchors if a.rsplit(".", 1)[-1] in ("run_greedy", "jacobi_iteration", "generate_lookahead")]
    assert max(anchors.index(a) for a in exported) < min(anchors.index(a) for a in internal)  # public first
    reference = "".join(page.read_text() for page in (site / "reference").rglob("index.html"))
    missing = [name for name in exported_names() if f'id="{name}"' not in reference]
    assert not missing, f"exported names without an API reference entry: {missing}"


def exported_names() -> list[str]:
    """The qualified name (mkdocstrings' anchor) of everything `ladref` and `ladref.bench` export."""
    import ast

    import ladref
    import ladref.bench

    names = []
    for package in (ladref, ladref.bench):
        folder = Path(package.__file__).parent
        for name in package.__all__:
            module = getattr(getattr(package, name), "__module__", "")
            if not module.startswith("ladref"):  # a constant or a type alias: the module that assigns it
                module = next(f"{package.__name__}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__" and any(
                    isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets)
                    for n in ast.parse(p.read_text()).body))
            names.append(f"{module}.{name}")
    return names
