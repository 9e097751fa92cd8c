"""Record the reference's answers for the hidden tests.

    python assignments/hidden/cases.py OUT.json

Run it with the reference first on the path (the autograder does, once per run). Every hidden
test module in this folder has a ``record()`` returning ``{test function: [case, ...]}``, each
case a JSON object with an "id", the inputs and the reference's answers; the autograder then
feeds the cases to the test functions of the same name in the student's run (the
``--hidden-cases`` option of ``grading_plugin``). Nothing here is shipped to students.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def record_all() -> dict[str, list[dict]]:
    """``{"test_file_stem::test_function": cases}`` over every hidden test module."""
    cases = {}
    for path in sorted(HERE.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name, found in module.record().items():
            cases[f"{path.stem}::{name}"] = found
    return cases


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    import ladref

    Path(args[0]).write_text(json.dumps({"reference": ladref.__file__, "cases": record_all()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
