"""The figures README and the docs cite come from committed results: the current ones stamped with a
clean commit and rendered into the pages, every other figure found in a result its section names."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+) ?[x×](?!\w)")  # a speedup or a ratio: "1.28x", "0.95 x"
CITED = re.compile(r"(?:benchmarks/)?(?:archive|results_gpu|results|peer_lade)/[\w./-]*")
HEADLINE_PAGES = ("README.md", "docs/index.md", "docs/benchmarks.md")
HISTORY_PAGES = ("docs/benchmarks_history.md",)  # past runs: each section cites its archive folder by name
NUMBER = re.compile(r"\d+\.\d+(?:e-?\d+)?")


def headline_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import headline  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return headline


def figures_in(path: Path) -> set[str]:
    """Every number of a results file or folder, as written and rounded to 1-3 decimals."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    found = set()
    for file in files:
        if file.suffix not in (".md", ".json", ".csv", ".log", ".txt"):
            continue
        for number in NUMBER.findall(file.read_text(encoding="utf-8", errors="ignore")):
            found.add(number)
            found.update(f"{float(number):.{d}f}" for d in (1, 2, 3))
    return found


def sections(text: str) -> list[str]:
    """A page cut at its headings (a "#" line inside a fenced code block is code, not a heading)."""
    parts, fenced = [[]], False
    for line in text.splitlines():
        fenced ^= line.lstrip().startswith("```")
        if not fenced and re.match(r"#{1,6} ", line) and parts[-1]:
            parts.append([])
        parts[-1].append(line)
    return ["\n".join(p) for p in parts]


def cited_paths(section: str) -> list[Path]:
    """The result files and folders a section of a page names (the nearest existing folder of each)."""
    paths = []
    for match in CITED.finditer(section):
        path = ROOT / ("" if match.group().startswith("benchmarks/") else "benchmarks/") / match.group().rstrip(".")
        while not path.exists() and path != ROOT:
            path = path.parent
        if path not in (ROOT, ROOT / "benchmarks"):
            paths.append(path)
    return paths


NEEDS_CHARTS = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="summaries draw charts: [bench]")


@NEEDS_CHARTS
def test_current_results_are_stamped_and_rendered():
    headline = headline_module()
    assert headline.problems(RESULTS, ROOT) == []


def test_headline_figures_are_current():
    """README, the overview and the results page cite only the current results (or render them)."""
    current = {f"{n}x" for n in figures_in(RESULTS)}
    for page in HEADLINE_PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        text = re.sub(r"<!-- current-results:start -->.*?<!-- current-results:end -->", "", text, flags=re.S)
        stale = [f"{m}x" for m in FIGURE.findall(text) if f"{m}x" not in current]
        assert stale == [], f"{page}: figures not in benchmarks/results/: {stale}"


def test_every_other_figure_is_in_a_result_its_section_cites():
    pages = sorted({p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
                   - set(HEADLINE_PAGES) - set(HISTORY_PAGES))
    missing = []
    for page in pages:
        for section in sections((ROOT / page).read_text(encoding="utf-8")):
            figures = FIGURE.findall(section)
            if not figures or re.match(r"#+ Targets", section):  # goals a benchmark is held to, not results
                continue
            known = set().union(*(figures_in(p) for p in cited_paths(section))) if cited_paths(section) else set()
            absent = [f for f in figures if f not in known]
            if absent:
                missing.append(f"{page} ({section.splitlines()[0][:60]}): {absent}")
    assert missing == [], "figures not found in the results their section names:\n" + "\n".join(missing)


@NEEDS_CHARTS
def test_the_check_fails_on_a_stale_table(tmp_path):
    """The render check is not vacuous: a hand-edited summary or README block is reported."""
    import shutil

    headline = headline_module()
    results = tmp_path / "benchmarks" / "results"
    shutil.copytree(RESULTS, results)
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    summary = results / "specbench" / "summary.md"
    summary.write_text(summary.read_text(encoding="utf-8").replace("x |", "x  |", 1), encoding="utf-8")
    found = headline.problems(results, tmp_path)
    assert any("specbench/summary.md differs" in p for p in found), found
