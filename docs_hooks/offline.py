"""MkDocs hook: the site shows its maths without network, and its pages load nothing from elsewhere.

Formulas are typeset when the site is built, as MathML, which browsers render without any script
or web font (`latex2mathml`, installed by the ``docs`` extra):

- Markdown pages: ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` in
  ``<span class="arithmatex">\\(...\\)</span>`` and ``$$...$$`` in
  ``<div class="arithmatex">\\[...\\]</div>``; each becomes a ``<math>`` element.
- Tutorial pages (mkdocs-jupyter): nbconvert leaves a markdown cell's ``$...$`` and ``$$...$$``
  as text for MathJax; each becomes a ``<math>`` element (code spans and blocks are left alone).
  The notebook template's MathJax loader and configuration are removed, and so is its loader of
  Mermaid from a CDN when the page has no Mermaid diagram.

A formula latex2mathml cannot convert, or converts with a command it does not know, is reported
as a warning (``mkdocs build --strict`` then fails) and left as LaTeX source.
"""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.offline")

# Commands latex2mathml does not know (\arg) or renders as another symbol (\sim as "~"),
# rewritten to equivalents it renders right.
REWRITES = ((re.compile(r"\\arg(?![A-Za-z])"), r"\\operatorname{arg}"),
            (re.compile(r"\\sim(?![A-Za-z])"), r"\\thicksim"))
UNKNOWN = re.compile(r">(\\[A-Za-z]+)<")  # latex2mathml copies a command it does not know into the output

ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
MARKDOWN_CELL = re.compile(r'<div class="[^"]*\bjp-RenderedMarkdown\b[^"]*"[^>]*>')
CODE = re.compile(r"(<(code|pre)\b.*?</\2>)", re.S)
DOLLARS = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<!\\)\$", re.S)
NOTEBOOK_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
NOTEBOOK_MERMAID = re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>', re.S)


def mathml(tex: str, display: bool, where: str) -> str | None:
    """`tex` (a formula without delimiters) as a ``<math>`` element, or None (with a warning)."""
    source = tex.strip()
    for pattern, replacement in REWRITES:
        source = pattern.sub(replacement, source)
    try:
        element = convert(source, display="block" if display else "inline")
    except Exception as err:  # latex2mathml raises its own errors and plain ones (IndexError, ...)
        log.warning("%s: cannot typeset %r: %s: %s", where, tex, type(err).__name__, err)
        return None
    unknown = UNKNOWN.findall(element)
    if unknown:
        log.warning("%s: cannot typeset %r: latex2mathml does not know %s", where, tex, ", ".join(unknown))
        return None
    return element


def typeset_arithmatex(text: str, where: str) -> str:
    """Replace arithmatex's ``\\(...\\)`` spans and ``\\[...\\]`` blocks by MathML."""

    def replace(match: re.Match) -> str:
        tex = html.unescape(match.group(2)).strip()
        display = match.group(1) == "div"
        return mathml(tex[2:-2], display, where) or match.group(0)

    return ARITHMATEX.sub(replace, text)


def typeset_dollars(text: str, where: str) -> str:
    """Replace ``$$...$$`` and ``$...$`` in HTML text by MathML, outside code spans and blocks."""

    def replace(match: re.Match) -> str:
        display = match.group(1) is not None
        tex = html.unescape(match.group(1) if display else match.group(2))
        return mathml(tex, display, where) or match.group(0)

    parts = CODE.split(text)  # [text, code, tag name, text, code, tag name, ...]
    return "".join(DOLLARS.sub(replace, part) if i % 3 == 0 else part for i, part in enumerate(parts) if i % 3 != 2)


def markdown_cells(text: str) -> list[tuple[int, int]]:
    """(start, end) of the rendered content of each notebook markdown cell in `text`."""
    spans = []
    for opening in MARKDOWN_CELL.finditer(text):
        depth = 0
        for tag in re.finditer(r"<div\b|</div>", text[opening.end():]):
            depth += 1 if tag.group(0) == "<div" else -1
            if depth < 0:
                spans.append((opening.end(), opening.end() + tag.start()))
                break
    return spans


def typeset_notebook(text: str, where: str) -> str:
    """A tutorial page: MathML for its markdown cells' maths, and no script from a CDN."""
    for start, end in reversed(markdown_cells(text)):
        text = text[:start] + typeset_dollars(text[start:end], where) + text[end:]
    text = NOTEBOOK_MATHJAX.sub("", text)
    if re.search(r'class="[^"]*\bjp-Mermaid\b', text):
        log.warning("%s: Mermaid diagrams are drawn by a script from a CDN; this site keeps to its own files", where)
    else:
        text = NOTEBOOK_MERMAID.sub("", text)
    return text


def on_page_content(text: str, page, config, files) -> str:
    where = page.file.src_uri
    if where.endswith(".ipynb"):
        return typeset_notebook(text, where)
    return typeset_arithmatex(text, where)
