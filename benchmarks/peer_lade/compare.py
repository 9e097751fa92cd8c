"""Check a run against another (e.g. the committed one): same tokens and steps on every common row.

A row is one (dataset, prompt, stack, method, config). Outputs and step counts are deterministic
for a given model, dtype and device, so any difference is a change in a decoder (or in the
arithmetic); the tokens fed per step are compared too, but only reported: ladref's own lookahead
verifies a trie, so it may feed fewer tokens than a run made with flat candidate rows.

    python benchmarks/peer_lade/run.py --limit 1 --max-new-tokens 64 --out build/peer_lade/check
    python benchmarks/peer_lade/compare.py benchmarks/peer_lade/results build/peer_lade/check

Exit status 1 when a common row differs in tokens or steps, or when no row is common.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_report import read_results  # noqa: E402

KEY = ("dataset", "prompt_id", "stack", "method", "config")


def compare(old_dir: Path, new_dir: Path) -> tuple[list[str], list[str], int]:
    """(differences in tokens or steps, differences in tokens fed only, rows compared).

    Raises:
        ValueError: the two runs used a different max_new_tokens, dtype or device.
    """
    (old_meta, old_rows), (new_meta, new_rows) = read_results(old_dir), read_results(new_dir)
    for setting in ("max_new_tokens", "dtype", "device"):
        if old_meta.get(setting) != new_meta.get(setting):
            raise ValueError(f"the runs differ in {setting}: {old_meta.get(setting)} vs {new_meta.get(setting)}")
    old = {tuple(r[k] for k in KEY): r for r in old_rows}
    differ, fed_only, common = [], [], 0
    for r in new_rows:
        key = tuple(r[k] for k in KEY)
        if key not in old:
            continue
        common += 1
        o, label = old[key], "/".join(key)
        if o["tokens"] != r["tokens"] or o["steps"] != r["steps"]:
            differ.append(f"{label}: steps {o['steps']} -> {r['steps']}, tokens {'same' if o['tokens'] == r['tokens'] else 'differ'}")
        elif o["fed"] != r["fed"]:
            fed_only.append(f"{label}: tokens fed {sum(o['fed'])} -> {sum(r['fed'])} (same tokens and steps)")
    return differ, fed_only, common


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="results folder (holding peer_lade.json)")
    parser.add_argument("new", type=Path, help="results folder to check against it")
    args = parser.parse_args(argv)
    try:
        differ, fed_only, common = compare(args.old, args.new)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    print("\n".join(differ + fed_only))
    print(f"[peer_lade] {common} common rows: {len(differ)} differ in tokens or steps, {len(fed_only)} in tokens fed only")
    return 1 if differ or not common else 0


if __name__ == "__main__":
    sys.exit(main())
