"""Hypothesis profiles: "dev" (quick, the default) and "ci" (more examples, derandomized).

CI sets the CI environment variable (as GitHub Actions and .ci/run do) to pick "ci";
``--hypothesis-profile=NAME`` overrides either way.
"""

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
