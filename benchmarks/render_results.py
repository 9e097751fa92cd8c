"""Render a results folder as Markdown: the machine, one table per dataset, set-up costs,
agreement in half precision and a speedup chart (`ladref.bench.report.render_summary`).

Usage:
    python benchmarks/render_results.py benchmarks/results_gpu     # writes summary.md (and speedups.png) there
    python benchmarks/render_results.py benchmarks/results --print # prints instead (the CPU tables of docs/benchmarks.md)
    python benchmarks/render_results.py benchmarks/results --agreement  # writes agreement.md: the agreement tables only
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ladref.bench.report import agreement_lines, render_summary


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv if not a.startswith("--")]
    if len(folders) != 1 or not folders[0].is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    if "--agreement" in argv:
        files = sorted(folders[0].glob("agreement_*.json"))
        text = "\n".join(line for f in files for line in agreement_lines(json.loads(f.read_text(encoding="utf-8"))))
        (folders[0] / "agreement.md").write_text(text or "No agreement results in this folder yet.\n", encoding="utf-8")
        print(f"wrote {folders[0] / 'agreement.md'}")
        return 0
    text = render_summary(folders[0])
    if "--print" in argv:
        print(text)
    else:
        (folders[0] / "summary.md").write_text(text, encoding="utf-8")
        print(f"wrote {folders[0] / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
