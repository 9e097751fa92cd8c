"""pytest plugin of the self-check (`selfcheck.py`): records what ran and enforces a per-test timeout.

Loaded with ``-p grading_plugin --grading-report PATH``. As the run goes it appends JSON lines
to PATH (so that a run killed at the overall timeout still tells what it had done):

    {"ladref": ".../ladref/__init__.py"}            where `import ladref` resolves (not executed)
    {"collected": [{"nodeid", "group", "tasks", "points"}, ...]}
    {"collect_error": nodeid, "message": ...}         a test file that could not be imported
    {"started": nodeid}
    {"nodeid": ..., "outcome": "passed" | "failed" | "skipped", "message": ...}

Node ids are shortened to ``file::test`` (they depend on the rootdir); a test's group is
``file::function`` (all parametrizations and Hypothesis examples of one test function), its
points the ``@pytest.mark.points(n)`` value (default 1).

``--test-timeout S`` fails any test whose body runs longer than S seconds (SIGALRM, on the
platforms that have it), with a `TestTimeout` that Hypothesis does not retry.

It also registers the Hypothesis profile "grading" (the self-check's default): the tests' quick
settings without the shrink phase, since shrinking an unimplemented function's failure only
costs time (run pytest yourself to see a minimal failing example).
"""

from __future__ import annotations

import importlib.util
import json
import signal
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
RETRY_S = 2.0  # after a timeout, raise again every RETRY_S seconds in case the code swallowed it


class TestTimeout(BaseException):
    """A test ran past --test-timeout (a BaseException, so that `except Exception` cannot hide it)."""

    __test__ = False  # not a test class


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grading")
    group.addoption("--grading-report", default=None, help="append what ran, as JSON lines, to this file")
    group.addoption("--test-timeout", type=float, default=None, help="fail a test whose body runs longer (seconds)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): weight of this test function's group in its task's grade (default 1)")
    path = config.getoption("--grading-report")
    if path is not None:
        config.pluginmanager.register(Recorder(Path(path)), "grading-recorder")
    timeout = config.getoption("--test-timeout")
    if timeout and hasattr(signal, "setitimer"):
        config.pluginmanager.register(Timeout(timeout), "grading-timeout")


def short(nodeid: str) -> str:
    """"dir/test_x.py::test_y[p]" -> "test_x.py::test_y[p]" (node ids depend on the rootdir)."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}" if rest else Path(path).name


def crash_message(report) -> str:
    """The one-line reason of a failed report ("NotImplementedError: ...", "AssertionError: ...")."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


def group_of(item: pytest.Item) -> str:
    """"test_x.py::test_y": the test function an item belongs to (its parametrizations share it)."""
    return f"{Path(str(item.fspath)).name}::{getattr(item, 'originalname', None) or item.name}"


class Timeout:
    """Arms SIGALRM around each test body; after a timeout, the rest of that test function's cases fail unrun."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired: set[str] = set()  # groups that ran past the limit once
        self.group = ""

    def _expire(self, signum, frame) -> None:
        self.expired.add(self.group)
        raise TestTimeout(f"the test ran past the {self.seconds:g} s limit (an endless loop?)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if group_of(item) in self.expired:
            raise TestTimeout("not run: an earlier case of this test ran past the time limit")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        self.group = group_of(item)
        previous = signal.signal(signal.SIGALRM, self._expire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, RETRY_S)
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class Recorder:
    """Writes collection results and outcomes to the report as they arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed: set[str] = set()

    def write(self, record: dict) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(record) + "\n")

    def pytest_sessionstart(self) -> None:
        spec = importlib.util.find_spec("ladref")
        self.write({"ladref": spec.origin if spec is not None else None})

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.write({"collect_error": short(report.nodeid), "message": report.longreprtext[-3000:]})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        items = []
        for item in session.items:  # after -m / -k deselection
            marker = item.get_closest_marker("points")
            items.append({
                "nodeid": short(item.nodeid),
                "group": group_of(item),
                "tasks": sorted({m.name for m in item.iter_markers() if m.name.startswith("task")}),
                "points": marker.args[0] if marker else 1,
            })
        self.write({"collected": items})

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.write({"started": short(nodeid)})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = short(report.nodeid)
        if report.failed and name not in self.failed:  # a failure in setup, call or teardown fails the test
            self.failed.add(name)
            self.write({"nodeid": name, "outcome": "failed", "message": crash_message(report)[:1000]})
        elif report.when == "call" and report.passed and name not in self.failed:
            self.write({"nodeid": name, "outcome": "passed"})
        elif report.skipped and report.when in ("setup", "call"):
            self.write({"nodeid": name, "outcome": "skipped", "message": crash_message(report)[:300]})
