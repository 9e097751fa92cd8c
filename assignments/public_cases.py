"""Record the public cases of task 2.2 from the reference: ``tests/data/minimal_cases.json``.

    python assignments/public_cases.py            # (re)write the file from the reference's loop
    python assignments/public_cases.py --check    # exit 1 when the file is not what the reference records

The public tests of task 2.2 (``tests/test_minimal.py``) compare a submission's loop, case by
case, with what the grader compares: the tokens, the type returned, the forward passes (the
model's ``forward`` wrapped and counted, whatever calls it) and the errors of bad input. Their
cases are drawn by the probes' own case generator (``hidden/task2_2.py``'s `decode_case`, the
visible group's sizes and a few larger ones), with fixed seeds, and answered by the reference's
loop here, so the file shows the kinds of check the grader makes on cases the grader does not
use. ``tests/test_course_rules.py`` fails when the file is not exactly what this records.
Instructor side only: the file it writes ships, this script does not.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "tests" / "data" / "minimal_cases.json"
SEED = 2202
SIZES = ((8, 24, 4, 4), (4, 40, 6, 5))  # (cases, longest, widest, largest): the visible group's, then larger


def probes():
    """The probe module of task 2.2 (``hidden/task2_2.py``), importable with its helpers."""
    for folder in (HERE / "hidden", ROOT / "tests"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    import task2_2

    return task2_2


def record() -> dict:
    """The cases and the reference's answers, as the file holds them."""
    task = probes()
    rng, decoding = random.Random(SEED), []
    for count, longest, widest, largest in SIZES:
        decoding += [task.decode_case(rng, len(decoding) + k, longest, widest, largest) for k in range(count)]
    bad = task.cases(SEED)["bad input"]  # the probes' own bad-input cases (they draw nothing at random)
    return {
        "about": ("Task 2.2's public cases, answered by the reference's loop: the tokens, the type returned and the "
                  "forward passes (the model's forward wrapped and counted), and the error type of each bad call. "
                  "Instructors regenerate it with: python assignments/public_cases.py"),
        "decoding": [{**case, "expected": task.decode(case)} for case in decoding],
        "bad calls": task.BAD,
        "bad input": [{**case, "expected": task.contract(case)} for case in bad],
    }


def text() -> str:
    """The file's text: `record` as JSON, one case (or entry) a line."""
    entries = []
    for key, value in record().items():
        if isinstance(value, list):
            value = "[\n" + ",\n".join(f"  {json.dumps(item)}" for item in value) + "\n ]"
        else:
            value = json.dumps(value)
        entries.append(f" {json.dumps(key)}: {value}")
    return "{\n" + ",\n".join(entries) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record task 2.2's public cases (see the module docstring).")
    parser.add_argument("--check", action="store_true", help="compare the file with a new recording; write nothing")
    args = parser.parse_args(argv)
    recorded = text()
    if args.check:
        same = OUT.is_file() and OUT.read_text() == recorded
        print(f"{OUT.relative_to(ROOT)} is {'up to date' if same else 'stale: run python assignments/public_cases.py'}")
        return 0 if same else 1
    OUT.write_text(recorded)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(json.loads(recorded)['decoding'])} decoding cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
