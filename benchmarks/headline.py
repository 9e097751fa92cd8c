"""What the current results say, generated: each ``benchmarks/results/<benchmark>/summary.md``, the
headline table ``benchmarks/results/headline.md`` and its copy in README.md (between the
``current-results`` markers). `benchmarks/current.py` calls `render_all` (write) and `check_all`
(compare, and check every result's stamp); docs/benchmarks.md includes the files with snippets.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from ladref.bench.report import render_summary

README_BLOCK = re.compile(r"(<!-- current-results:start -->\n)(.*?)(<!-- current-results:end -->)", re.S)
BENCHMARKS = ("specbench", "tasks", "compiled", "load", "multi", "host_overhead", "cost", "demo")
METHOD_NAMES = {"generate": "generate()", "hf_plookup": "generate() prompt lookup"}


def stamp(meta: dict) -> str:
    """One line: the commit, machine, dtype and versions a result was measured with, and how busy the machine was."""
    commit = str(meta.get("git_commit") or "?")[:7]
    return (f"Commit `{commit}`, {meta.get('machine', '?')}, {meta.get('dtype', '?')}, torch {meta.get('torch', '?')}, "
            f"transformers {meta.get('transformers', '?')}.{_state(meta)}")


def _state(meta: dict) -> str:
    """What the probe saw before the run (nothing for a result from before the probe)."""
    state = meta.get("machine_state")
    if not state:
        return ""
    busy = f" **Measured on a busy machine (--force): {'; '.join(state['busy'])}.**" if state.get("busy") else ""
    return f" Before the run: load average {state['load']:.2f}, greedy steps got {state['share']:.0%} of the CPU.{busy}"


def cpu_model(meta: dict) -> str:
    """The machine's model without its thread count ("AMD EPYC, 2 torch threads" -> "AMD EPYC")."""
    return str(meta.get("machine", "?")).split(",")[0].strip()


def stamp_problems(name: str, meta: dict) -> list[str]:
    """Why a result's stamp does not name a clean commit, machine, thread count and versions ([] if it does)."""
    commit, problems = str(meta.get("git_commit") or ""), []
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        problems.append(f"{name}: git_commit {commit!r} is not a clean commit (rerun at a committed checkout)")
    for key in ("torch", "transformers", "machine", "command"):
        if not meta.get(key):
            problems.append(f"{name}: no {key} in its meta")
    if "threads" not in str(meta.get("machine", "")) and meta.get("device", "cpu") == "cpu":
        problems.append(f"{name}: its machine does not say the thread count")
    return problems


def _json(folder: Path, pattern: str) -> tuple[Path, dict]:
    path = next(iter(sorted(folder.glob(pattern))), None)
    if path is None:
        raise FileNotFoundError(f"{folder}: no {pattern}; run: python benchmarks/current.py run {folder.name}")
    return path, json.loads(path.read_text(encoding="utf-8"))


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _figure(row: dict) -> tuple[float, str]:
    """(the value it is sorted by, its text): over `generate()` with its interval; pooled over it in a result
    from before intervals; over greedy_decode in a result without a `generate()` row."""
    if row.get("vs_generate"):
        v = row["vs_generate"]
        return v["geomean"], f"{_x(v['geomean'])} [{v['low']:.2f}, {v['high']:.2f}]"
    if row.get("speedup_vs_generate"):
        return row["speedup_vs_generate"], f"{_x(row['speedup_vs_generate'])} (pooled)"
    return row["speedup"], f"{_x(row['speedup'])} over greedy_decode"


def _speedups(rows: list[dict]) -> str:
    skip = ("generate",) if any(r["method"] == "generate" for r in rows) else ("greedy",)
    shown = sorted((r for r in rows if r["method"] not in skip), key=lambda r: -_figure(r)[0])
    return ", ".join(f"{METHOD_NAMES.get(r['method'], r['method'])} {_figure(r)[1]}" for r in shown)


def _identical(rows: list[dict], key: str = "identical", total: str = "prompts") -> str:
    """The outputs equal to greedy's, over the other methods only (greedy is the reference, not a match)."""
    others = [r for r in rows if r["method"] != "greedy"]
    same, of = sum(r[key] for r in others), sum(r[total] for r in others)
    return f"{same}/{of}"


def summaries(folder: Path) -> dict[str, str]:
    """Each benchmark's summary.md text (what is in `folder`), keyed by benchmark."""
    out = {}
    for name in ("specbench", "tasks", "compiled"):
        if (folder / name).is_dir():
            end = "<!-- --8<-- [end:tables] -->"
            out[name] = render_summary(folder / name).replace(end, _compiled_split(folder / name) + _repro(folder / name) + end)
    for name, pattern, table in (("load", "load_cpu.json", "load_cpu.md"), ("multi", "multi_*.json", None),
                                 ("host_overhead", "host_overhead.json", "host_overhead.md")):
        if (folder / name).is_dir():
            path, data = _json(folder / name, pattern)
            text = (folder / name / (table or path.with_suffix(".md").name)).read_text(encoding="utf-8")
            out[name] = _tables(f"{stamp(data['meta'])} Command: `{data['meta']['command']}`.\n\n{text.strip()}")
    if (folder / "cost").is_dir():
        out["cost"] = _cost_summary(folder / "cost")
    if (folder / "demo").is_dir():
        _, data = _json(folder / "demo", "demo.json")
        shown = (folder / "demo" / "demo.txt").read_text(encoding="utf-8").strip()
        out["demo"] = _tables(f"{stamp(data['meta'])} `python -m ladref demo`: {data['meta']['wall_s']:.0f} s, load "
                              f"average {data['meta']['load_average_before']:.2f} before it.\n\n```text\n{shown}\n```")
    return out


def _repro(folder: Path) -> str:
    """The folder's rerun check (`current.py repro`), if one was made."""
    path = folder / "repro.md"
    if not path.is_file():
        return ""
    return f"\nRerun check (`python benchmarks/current.py repro {folder.name}`):\n\n{path.read_text(encoding='utf-8').strip()}\n"


def _tables(text: str) -> str:
    return f"<!-- --8<-- [start:tables] -->\n{text.strip()}\n<!-- --8<-- [end:tables] -->\n"


def _compiled_gains(folder: Path) -> tuple[float, float] | None:
    """(compilation, drafting): compiled greedy / `generate()` and compiled adaptive / compiled greedy, in
    tokens per second; None for a folder without the three rows."""
    rate = {r["method"]: r["tokens_per_second"] for r in _json(folder, "specbench.json")[1]["summary"]}
    if not {"generate", "compiled_greedy", "compiled_adaptive"} <= set(rate):
        return None
    return rate["compiled_greedy"] / rate["generate"], rate["compiled_adaptive"] / rate["compiled_greedy"]


def _compiled_split(folder: Path) -> str:
    """The compiled speedup split in two, as a sentence; empty for another folder."""
    gains = _compiled_gains(folder) if folder.name == "compiled" else None
    if gains is None:
        return ""
    return (f"\nThe compiled adaptive row's {_x(gains[0] * gains[1])} over `generate()` is {_x(gains[0])} from "
            f"compiling greedy decoding (compiled greedy / `generate()`) times {_x(gains[1])} from drafting "
            "(compiled adaptive / compiled greedy).\n")


def _cost_summary(folder: Path) -> str:
    _, data = _json(folder, "cost_cpu.json")
    widths, rows = data["widths"], []
    for kv, seconds in zip(data["kv_lengths"], data["seconds"]):
        rows.append(f"| {kv} | " + " | ".join(f"{s / seconds[0]:.2f}" for s in seconds) + " |")
    header = "| KV length | " + " | ".join(f"q={w}" for w in widths) + " |\n|---|" + "---|" * len(widths)
    record, rounds = data["meta"].get("protocol"), ""
    if record:
        state = "flagged: its rounds never agreed" if record["flagged"] else "settled"
        rounds = (f" The curve is the median of {len(record['rounds_s'])} whole measurements ({state}; CPU shares "
                  f"{', '.join(f'{x:.2f}' for x in record['cpu_shares'])}); its worst cell's largest time over its smallest "
                  f"across them: {record['worst_cell_spread']:.2f}.")
    return _tables(f"{stamp(data['meta'])} Command: `{data['meta']['command']}`.{rounds} The step cost t(q) over t(1), at "
                   f"each KV length ({data['label']}):\n\n{header}\n" + "\n".join(rows))


def headline(folder: Path, readme: bool = False) -> str:
    """The headline table: one line per benchmark, its main figures and the commit that measured them.

    Args:
        folder: the current results (``benchmarks/results``).
        readme: link each benchmark to its summary.md (README) rather than to its section of
            docs/benchmarks.md (the docs page).
    """
    lines = ["| benchmark | speedup over transformers' `generate()` [95% interval over prompts] unless said (CPU, "
             "SmolLM2-135M, float32) | identical to greedy (other methods) | commit |", "|---|---|---|---|"]

    def row(name: str, what: str, result: str, same: str, meta: dict) -> None:
        link = f"benchmarks/results/{name}/summary.md" if readme else f"#{name}"
        lines.append(f"| [{what}]({link}) | {result} | {same} | `{str(meta['git_commit'])[:7]}` |")

    if (folder / "specbench").is_dir():
        _, d = _json(folder / "specbench", "specbench.json")
        row("specbench", f"Spec-Bench, {d['summary'][0]['prompts']} prompts", _speedups(d["summary"]),
            _identical(d["summary"]), d["meta"])
    if (folder / "tasks").is_dir():
        for path in sorted(p for p in (folder / "tasks").glob("*.json") if p.stem != "repro"):
            d = json.loads(path.read_text(encoding="utf-8"))
            row("tasks", f"{d['meta'].get('dataset', path.stem)}, {d['summary'][0]['prompts']} prompts",
                _speedups(d["summary"]), _identical(d["summary"]), d["meta"])
    if (folder / "compiled").is_dir():
        _, d = _json(folder / "compiled", "specbench.json")
        gains = _compiled_gains(folder / "compiled")
        result = _speedups(d["summary"]) if gains is None else (
            f"compiled adaptive {_x(gains[0] * gains[1])} over `generate()`: compiling {_x(gains[0])} x drafting {_x(gains[1])}")
        peer = next((r["vs_generate_compiled"] for r in d["summary"] if r["method"] == "compiled_adaptive"
                     and r.get("vs_generate_compiled")), None)
        if peer:
            result += f"; {_x(peer['geomean'])} [{peer['low']:.2f}, {peer['high']:.2f}] over transformers' compiled `generate()`"
        row("compiled", "compiled", result, _identical(d["summary"]), d["meta"])
    if (folder / "load").is_dir():
        _, d = _json(folder / "load", "load_cpu.json")
        ada = sorted((r for r in d["rows"] if r["method"] == "adaptive"), key=lambda r: r["batch"])
        row("load", "under load: adaptive over batched greedy (pooled; per batch [95% interval])", ", ".join(
            f"B={r['batch']} {_x(r['speedup'])}" + (f" [{r['vs_greedy']['low']:.2f}, {r['vs_greedy']['high']:.2f}]"
                                                    if r.get("vs_greedy") and r["vs_greedy"]["prompts"] > 1 else "") for r in ada),
            _identical(d["rows"], "rows_equal_batched_greedy", "rows"), d["meta"])
    if (folder / "multi").is_dir():
        _, d = _json(folder / "multi", "multi_*.json")
        row("multi", f"requests in order, {d['summary'][0]['requests']} requests", _speedups(d["summary"]),
            _identical(d["summary"], "matches", "requests"), d["meta"])
    if (folder / "host_overhead").is_dir():
        _, d = _json(folder / "host_overhead", "host_overhead.json")
        reads = max(p["reads_per_pass"] for p in d["points"] if p["method"] != "generate")
        row("host_overhead", "host work a pass (tiny model)", f"at most {reads:.1f} device-to-host reads a pass at "
            f"B = {', '.join(map(str, d['meta']['settings']['batches']))}, every method", _identical_points(d["points"]),
            d["meta"])
    return "\n".join(lines) + "\n"


def _identical_points(points: list[dict]) -> str:
    return f"{sum(bool(p['match']) for p in points)}/{len(points)}"


def render_all(results: Path, root: Path) -> int:
    """Write every summary.md, headline.md and README's block; 0. Refused (1) for results from several machine types."""
    mixed = mixed_machines(results)
    if mixed:
        print(f"refused: {mixed}")
        return 1
    texts = summaries(results)
    for name, text in texts.items():
        (results / name / "summary.md").write_text(text, encoding="utf-8")
    (results / "headline.md").write_text(headline(results), encoding="utf-8")
    readme, text = root / "README.md", headline(results, readme=True)
    readme.write_text(README_BLOCK.sub(lambda m: m.group(1) + text + m.group(3), readme.read_text(encoding="utf-8")),
                      encoding="utf-8")
    print(f"wrote {', '.join(sorted(texts))} summaries, headline.md and README's block")
    return 0


def problems(results: Path, root: Path) -> list[str]:
    """Every way the committed generated files differ from what the results give, and every unclean stamp."""
    found = []
    with tempfile.TemporaryDirectory() as scratch:  # render_summary writes charts: render a copy
        copy = Path(scratch) / "results"
        shutil.copytree(results, copy)
        texts, text, readme_text = summaries(copy), headline(copy), headline(copy, readme=True)
    for name in BENCHMARKS:
        if not (results / name).is_dir():
            found.append(f"benchmarks/results/{name}/ is missing: python benchmarks/current.py run {name}")
    for name, expected in texts.items():
        path = results / name / "summary.md"
        if not path.is_file() or path.read_text(encoding="utf-8") != expected:
            found.append(f"{path.relative_to(root)} differs from its results: python benchmarks/current.py render")
    if not (results / "headline.md").is_file() or (results / "headline.md").read_text(encoding="utf-8") != text:
        found.append("benchmarks/results/headline.md differs from the results: python benchmarks/current.py render")
    block = README_BLOCK.search((root / "README.md").read_text(encoding="utf-8"))
    if block is None or block.group(2) != readme_text:
        found.append("README.md's current-results block differs from headline.md: python benchmarks/current.py render")
    for path in sorted(results.rglob("*.json")):
        meta = json.loads(path.read_text(encoding="utf-8")).get("meta")
        if isinstance(meta, dict) and "git_commit" in meta:
            found += stamp_problems(str(path.relative_to(root)), meta)
            if (meta.get("machine_state") or {}).get("busy"):
                found.append(f"{path.relative_to(root)}: measured on a busy machine (--force); rerun it on a quiet one")
    mixed = mixed_machines(results)
    return found + ([mixed] if mixed else [])


def mixed_machines(results: Path) -> str | None:
    """Why the results cannot share one headline table: they come from more than one CPU model (None: one)."""
    machines: dict[str, list[str]] = {}
    for path in sorted(results.rglob("*.json")):
        meta = json.loads(path.read_text(encoding="utf-8")).get("meta")
        if isinstance(meta, dict) and "machine" in meta:
            machines.setdefault(cpu_model(meta), []).append(str(path.relative_to(results)))
    if len(machines) <= 1:
        return None
    return ("the headline would mix machines: " + "; ".join(f"{m}: {', '.join(p[:3])}{' ...' if len(p) > 3 else ''}"
                                                           for m, p in machines.items()) + " (rerun them on one machine type)")


def check_all(results: Path, root: Path) -> int:
    """Print `problems`; 1 if there are any, else 0."""
    found = problems(results, root)
    print("\n".join(found) if found else "every current result is stamped and every generated file matches it")
    return 1 if found else 0
