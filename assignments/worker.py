"""Call a task's probes on one package and write what they return, as data (run by the autograder).

    python worker.py PACKAGE PROBES MODULE < request.json > REPORT

PACKAGE holds ``ladref/`` (the reference's files with the submission's file for one task),
PROBES the probe modules (``task1_2.py`` ...) and the helpers they import. The request (JSON on
stdin) is ``{"seed": int, "cases": {group: [case, ...]} | null, "case_timeout": seconds}``; with
``"cases": null`` the worker draws them itself from ``MODULE.cases(seed)`` and writes them first
(that is how the autograder records the reference's answers). The report is JSON lines:

    {"imported": path of ladref}                      the probes and the task's module imported
    {"groups": {group: {"points", "visible", "judge", "cases"}}}  only when the cases were drawn here
    {"group", "id", "got": observation}               or "error": "Type: message"

This process runs the submitted code, so nothing it writes is trusted: the autograder compares
each observation with the reference's in its own process, and the expected answers never come
here. Its report goes to the file the worker was given as stdout (opened by the autograder,
which the submission could not open itself); the submission's own prints go to stderr. A case
running past ``case_timeout`` fails, and the rest of its group is not run.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path


class CaseTimeout(BaseException):
    """A case ran past its limit (a BaseException, so that `except Exception` cannot hide it)."""


def expire(signum, frame) -> None:
    raise CaseTimeout("ran past the time limit (an endless loop?)")


def error_text(exc: BaseException) -> str:
    """ "NotImplementedError: task1_2: ..." plus the innermost line of the submission that raised it."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/ladref/" in f.filename]
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:2000]


def observe(report, module, group: str, cases: list[dict], timeout: float) -> None:
    """Call the group's probe on every case; after a timeout, the rest of the group is left unrun."""
    probe = module.GROUPS[group].observe
    for case in cases:
        record, timed_out = {"group": group, "id": case["id"]}, False
        signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)  # raised again every second if swallowed
        try:
            record["got"] = probe(case)
        except CaseTimeout:
            record["error"], timed_out = f"the call ran past the {timeout:g} s limit (an endless loop?)", True
        except BaseException as exc:  # noqa: BLE001 - anything the submission raises is its answer
            record["error"] = error_text(exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            line = json.dumps(record)
        except (TypeError, ValueError) as exc:
            line = json.dumps({"group": group, "id": case["id"], "error": f"the answer is not plain data: {exc}"})
        report.write(line + "\n")
        report.flush()
        if timed_out:
            return


def main(argv: list[str]) -> int:
    package, probes, name = argv
    request = json.loads(sys.stdin.read())
    report_fd = os.dup(1)
    os.dup2(2, 1)  # the submission's prints go to stderr, never into the report
    sys.path[:0] = [package, probes]
    signal.signal(signal.SIGALRM, expire)
    with os.fdopen(report_fd, "w") as report:
        module = importlib.import_module(name)  # the probes import the task's module: the submitted code runs here
        import ladref

        report.write(json.dumps({"imported": ladref.__file__}) + "\n")
        report.flush()
        if hasattr(module, "warm_up"):  # slow first imports, before any case is timed (never the submission's code)
            module.warm_up()
        cases = request["cases"]
        if cases is None:
            cases = module.cases(request["seed"])
            groups = {g: {"points": module.GROUPS[g].points, "visible": module.GROUPS[g].visible,
                          "judge": getattr(module.GROUPS[g], "judge", "equal"), "cases": c} for g, c in cases.items()}
            report.write(json.dumps({"groups": groups}) + "\n")
            report.flush()
        for group, found in cases.items():
            observe(report, module, group, found, request["case_timeout"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
