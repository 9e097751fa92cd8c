"""pytest plugin used by the autograder: records each test's task markers and outcome.

Loaded with ``-p grading_plugin --grading-report PATH``; at the end of the session it writes
``{"ladref_file": ..., "tests": [{"nodeid", "tasks", "outcome"}, ...]}`` (node ids shortened to
``file::test``) to PATH as JSON.
``ladref_file`` is where ``import ladref`` resolved, so the autograder can prove that it graded
the student's copy and not an installed reference.

It also registers the Hypothesis profile "grading" (the autograder's default): the tests' quick
settings without the shrink phase, since shrinking an unimplemented function's failure only
costs time (run pytest yourself to see a minimal failing example).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "grading",
    max_examples=15,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--grading-report", default=None, help="write per-test task outcomes to this JSON file")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--grading-report")
    if path is not None:
        config.pluginmanager.register(Recorder(Path(path)), "grading-recorder")


def short(nodeid: str) -> str:
    """"dir/test_x.py::test_y[p]" -> "test_x.py::test_y[p]" (node ids depend on the rootdir)."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


class Recorder:
    """Collects task markers at collection time and outcomes as reports arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tasks: dict[str, list[str]] = {}
        self.outcomes: dict[str, str] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:  # after -m / -k deselection
            self.tasks[short(item.nodeid)] = sorted({m.name for m in item.iter_markers() if m.name.startswith("task")})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = short(report.nodeid)
        if report.failed:  # a failure in setup, call or teardown fails the test
            self.outcomes[name] = "failed"
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            self.outcomes.setdefault(name, report.outcome)

    def pytest_sessionfinish(self) -> None:
        import ladref

        tests = [{"nodeid": n, "tasks": t, "outcome": self.outcomes.get(n, "not run")} for n, t in self.tasks.items() if t]
        self.path.write_text(json.dumps({"ladref_file": ladref.__file__, "tests": tests}, indent=1))
