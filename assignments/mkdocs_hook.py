"""MkDocs hook: the Assignments page shows the task table and every handout, rendered from
``assignments/tasks.py`` and ``assignments/handouts/`` at build time (`handouts.site_sections`),
so the site never drifts from what a student copy contains."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from handouts import site_sections  # noqa: E402


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "assignments.md":
        return markdown
    for marker, text in site_sections().items():
        if marker not in markdown:
            raise ValueError(f"docs/assignments.md lost its {marker} line")
        markdown = markdown.replace(marker, text)
    return markdown
