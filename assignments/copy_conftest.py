"""The conftest.py of a student copy (`make_student.py` writes it): see `ORIGIN_CHECK`'s docstring."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import TASKS  # noqa: E402

ORIGIN_CHECK = '''"""The student copy's pytest set-up: test this folder's ladref, and report failures quickly.

1. Stops the tests when `import ladref` would not load this folder's package (the code you
   write): an installed ladref (for instance the reference, after an editable install of the
   full project) would otherwise be tested instead of yours and could pass on untouched stubs.
2. Loads the Hypothesis profile "student": the tests' usual examples, without the shrink phase
   (shrinking a failure of unfinished code reruns the test hundreds of times). To see a minimal
   failing example, run one test with ``--hypothesis-profile=dev``.
3. When a test of one task fails on another task's unfinished code (its NotImplementedError),
   adds a line to the failure saying which task to finish first.
"""

import importlib.util
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

HERE = Path(__file__).resolve().parent
TASK_NAMES = __TASK_NAMES__  # marker -> how the README names the task

settings.register_profile("student", max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=[HealthCheck.too_slow])


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if config.pluginmanager.has_plugin("grading_plugin"):
        return  # the autograder composes the package elsewhere and checks the origin itself
    spec = importlib.util.find_spec("ladref")
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    if origin != HERE / "ladref" / "__init__.py":
        raise pytest.UsageError(
            f"the tests would import ladref from {origin}, not from {HERE / 'ladref'}. "
            f"Run pytest from {HERE} (python -m pytest), or reinstall this folder: python -m pip install -e ."
        )
    if not config.getoption("--hypothesis-profile", None):
        settings.load_profile("student")


def unfinished_task(error):
    """The task marker a stub's NotImplementedError starts with ("task1_5: implement ..."), else None.

    A group of errors (Hypothesis reports several distinct failures as one) is searched in order.
    """
    for inner in getattr(error, "exceptions", ()):
        found = unfinished_task(inner)
        if found:
            return found
    if not isinstance(error, NotImplementedError):
        return None
    marker = str(error).split(":", 1)[0]
    return marker if marker in TASK_NAMES else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.excinfo is None:
        return
    needed = unfinished_task(call.excinfo.value)
    own = [mark.name for mark in item.iter_markers() if mark.name in TASK_NAMES]
    if needed is None or not own or needed in own:
        return
    line = f"{own[0]} needs {TASK_NAMES[needed]} first: finish it, then come back (README: the order)"
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("the order of the tasks", line)
    else:
        report.sections.append(("the order of the tasks", line))
'''


def conftest_source() -> str:
    """The copy's conftest.py: `ORIGIN_CHECK` with every task's name ("task 1.5 (the draft tree and its mask)")."""
    names = {task.marker: f"task {task.number} ({task.short_title})" for task in TASKS}
    return ORIGIN_CHECK.replace("__TASK_NAMES__", repr(names), 1)
