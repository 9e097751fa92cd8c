"""MkDocs hook: put the tutorials on the site as ``tutorials/NN_name.ipynb`` pages, executed.

For each source ``tutorials/NN_name.py`` (jupytext percent format) the page is the executed
notebook ``<tutorials_build>/tutorials/NN_name.ipynb``. When that notebook is missing, or was
executed from another version of the source (its ``metadata.ladref.source_sha256`` differs), the
build executes the tutorial first, with the code of ``python tutorials/run.py`` and into the same
folder, so later builds (and ``mkdocs serve``'s rebuilds) reuse it: the first build takes a few
minutes, later ones only re-run a tutorial whose source changed. ``python tutorials/run.py`` makes
the same notebooks ahead of time.

A tutorial that fails to execute is reported as a warning, which stops a strict build (mkdocs.yml
sets ``strict: true``); a build without strict mode shows its source without outputs, under a
note that says so.

``tutorials_build`` is set under ``extra:`` in mkdocs.yml, relative to it (default ``build``).
(MkDocs resolves a page's file as ``src_dir / "tutorials/NN_name.ipynb"``, hence the folder names.)
Each tutorial page starts with a link that downloads its notebook (mkdocs-jupyter's
``include_source`` copies the ``.ipynb`` next to the page; the Material theme shows no link).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import time
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.tutorials")
TUTORIALS = Path(__file__).resolve().parent
WITHOUT_OUTPUTS: set[str] = set()  # notebook names of the pages shown without outputs in this build


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


def execute(source: Path, folder: Path) -> None:
    """Execute `source` into ``folder/<stem>.ipynb`` with ``tutorials/run.py``'s `execute`."""
    spec = importlib.util.spec_from_file_location("ladref_tutorials_run", TUTORIALS / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    run.execute(source, folder)


@event_priority(100)  # before mkdocs-jupyter wraps notebook files
def on_files(files: Files, config) -> Files:
    build = Path(config.config_file_path).parent / config.extra.get("tutorials_build", "build")
    WITHOUT_OUTPUTS.clear()
    for source in sorted(TUTORIALS.glob("[0-9][0-9]_*.py")):
        src_dir = build
        if executed_notebook(source, build / "tutorials") is None:
            log.info("executing %s into %s (no executed notebook of its current source there)", source.name,
                     build / "tutorials")
            start = time.perf_counter()
            try:
                execute(source, build / "tutorials")
                log.info("executed %s in %.0f s", source.name, time.perf_counter() - start)
            except Exception as err:  # the page then shows the source, and the build says why
                log.warning("tutorial %s failed to execute, its page shows no outputs: %s",
                            source.name, str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__)
                WITHOUT_OUTPUTS.add(f"{source.stem}.ipynb")
                src_dir = build / "unexecuted"
                unexecuted_notebook(source, src_dir / "tutorials")
        files.append(File(f"tutorials/{source.stem}.ipynb", str(src_dir), config.site_dir, config.use_directory_urls))
    return files


def download_link(notebook_name: str) -> str:
    """The HTML put at the top of a tutorial page: a link that downloads its notebook."""
    return (f'<p class="ladref-download"><a href="{notebook_name}" download>Download this tutorial as a notebook '
            f"(<code>{notebook_name}</code>)</a>; open it with <code>jupyter lab</code>.</p>\n")


def no_outputs_note(notebook_name: str) -> str:
    """The HTML put at the top of a page whose tutorial failed to execute when the site was built."""
    return ('<div class="admonition warning"><p class="admonition-title">Shown without outputs</p>'
            f"<p>This tutorial failed to execute when this site was built: run "
            f"<code>python tutorials/run.py {notebook_name[:2]}</code> to see why.</p></div>\n")


def on_page_content(html: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.startswith("tutorials/") and src.endswith(".ipynb"):
        name = src.rsplit("/", 1)[-1]
        note = no_outputs_note(name) if name in WITHOUT_OUTPUTS else ""
        return note + download_link(name) + html
    return html
