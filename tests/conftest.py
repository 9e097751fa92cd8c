"""Hypothesis profiles: "dev" (quick, the default) and "ci" (more examples, derandomized).

CI sets the CI environment variable (as GitHub Actions and .ci/run do) to pick "ci";
``--hypothesis-profile=NAME`` overrides either way.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/strategies.py

settings.register_profile("dev", max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (and 2 shared cores are easily oversubscribed).

    Test modules of tiny models opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def user_cache_folder(tmp_path_factory):
    """The user's cache folder (`ladref.pricing.cost_cache.default_cache_path`: measured cost curves) is a fresh
    temporary one for the test run, so tests neither read nor write the real one; subprocesses inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("user-cache")
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


class ExecutedTutorials:
    """Each tutorial executed at most once per test run, by `tutorials/run.py`'s `execute`, into `folder`.

    `notebook(source)` executes on first use and returns the executed notebook (or raises that
    run's error again), so the tutorial tests and the site build share one execution.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self._runs: dict[Path, object] = {}

    def notebook(self, source: Path):
        if source not in self._runs:
            spec = importlib.util.spec_from_file_location("tutorials_run", source.parent / "run.py")
            run = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(run)
            try:
                self._runs[source] = run.execute(source, self.folder)
            except Exception as err:  # kept, and raised again for every test that needs it
                self._runs[source] = err
        result = self._runs[source]
        if isinstance(result, Exception):
            raise result
        return result


@pytest.fixture(scope="session")
def executed_tutorials(tmp_path_factory):
    """The tutorials executed once for the whole run (tests/test_tutorials.py, tests/test_docs.py)."""
    return ExecutedTutorials(tmp_path_factory.mktemp("executed-tutorials"))
