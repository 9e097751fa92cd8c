"""MkDocs hook: put the tutorials on the site as ``tutorials/NN_name.ipynb`` pages.

For each source ``tutorials/NN_name.py`` (jupytext percent format) the page is the executed
notebook ``<tutorials_build>/tutorials/NN_name.ipynb`` written by ``python tutorials/run.py``
when it exists and was executed from the current source (its ``metadata.ladref.source_sha256``
matches); otherwise the page is the source converted to a notebook without outputs (written to
``<tutorials_build>/unexecuted/tutorials/``), and the build logs which tutorials lack outputs.
``tutorials_build`` is set under ``extra:`` in mkdocs.yml, relative to it (default ``build``).
(MkDocs resolves a page's file as ``src_dir / "tutorials/NN_name.ipynb"``, hence the folder names.)

The docs build never executes code, so it stays fast and deterministic; CI runs the tutorials
first (``python tutorials/run.py``) so that the published pages show their plots and traces.
Each tutorial page starts with a link that downloads its notebook (mkdocs-jupyter's
``include_source`` copies the ``.ipynb`` next to the page; the Material theme shows no link).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.tutorials")
TUTORIALS = Path(__file__).resolve().parent


def source_sha256(source: Path) -> str:
    """Hash of a tutorial's source, stored in the executed notebook by run.py."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def executed_notebook(source: Path, folder: Path) -> Path | None:
    """The executed notebook of `source` in `folder`, if it is there and up to date."""
    notebook = folder / f"{source.stem}.ipynb"
    if not notebook.is_file():
        return None
    meta = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {}).get("ladref", {})
    return notebook if meta.get("source_sha256") == source_sha256(source) else None


def unexecuted_notebook(source: Path, folder: Path) -> Path:
    """Write `source` as a notebook without outputs to ``folder/<stem>.ipynb``."""
    import jupytext

    folder.mkdir(parents=True, exist_ok=True)
    notebook = folder / f"{source.stem}.ipynb"
    jupytext.write(jupytext.read(source), notebook)
    return notebook


@event_priority(100)  # before mkdocs-jupyter wraps notebook files
def on_files(files: Files, config) -> Files:
    build = Path(config.config_file_path).parent / config.extra.get("tutorials_build", "build")
    missing = []
    for source in sorted(TUTORIALS.glob("[0-9][0-9]_*.py")):
        src_dir = build
        if executed_notebook(source, build / "tutorials") is None:
            missing.append(source.name)
            src_dir = build / "unexecuted"
            unexecuted_notebook(source, src_dir / "tutorials")
        files.append(File(f"tutorials/{source.stem}.ipynb", str(src_dir), config.site_dir, config.use_directory_urls))
    if missing:
        log.info("tutorials shown without outputs (run `python tutorials/run.py` first): %s", ", ".join(missing))
    return files


def download_link(notebook_name: str) -> str:
    """The HTML put at the top of a tutorial page: a link that downloads its notebook."""
    return (f'<p class="ladref-download"><a href="{notebook_name}" download>Download this tutorial as a notebook '
            f"(<code>{notebook_name}</code>)</a>; open it with <code>jupyter lab</code>.</p>\n")


def on_page_content(html: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.startswith("tutorials/") and src.endswith(".ipynb"):
        return download_link(src.rsplit("/", 1)[-1]) + html
    return html
