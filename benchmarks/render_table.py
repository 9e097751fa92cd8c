"""Print the Markdown results table of docs/benchmarks.md from saved bench JSON files.

Usage: python benchmarks/render_table.py benchmarks/results/{humaneval,mtbench,math}.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ladref.bench_report import MethodSummary, markdown_table


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    tables = []
    for path in paths:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        summaries = [MethodSummary(**row) for row in payload["summary"]]
        tables.append(markdown_table(summaries, payload["meta"].get("dataset", Path(path).stem)).splitlines())
    print("\n".join(tables[0] + [line for table in tables[1:] for line in table[2:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
