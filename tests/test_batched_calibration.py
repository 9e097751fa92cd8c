"""A batch's policy calibrated by its passes' times (``PolicySettings(calibrate=True)``).

The host times the passes between two reads (`ladref.batched.gate.Gate`: no sync of its own) and
moves a log-correction of the surface per width bucket and overall
(`ladref.batched.prices.BatchPrices.timed`), which the policy's prices and its gate then use. The
time here is a clock the forward passes advance by what they "cost", so the tests do not depend on
this machine's speed.
"""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model
from test_batched_gate import FLAT, adaptive, greedy

from ladref.batched import gate as gate_module
from ladref.batched.cache import BatchCache
from ladref.batched.policy import BatchPolicy
from ladref.batched.prices import BatchPrices
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.pricing.cost import CostModel
from ladref.pricing.policy import PolicySettings
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")


class Clock:
    """The time the gate reads: advanced only by the forward passes, as `cost` says a pass of q tokens takes."""

    def __init__(self, cost) -> None:
        self.now, self.cost = 0.0, cost

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """Passes that take 10 ms a row and token fed plus 30 ms for each extra token: drafting is dear."""
    clock = Clock(lambda rows, q: 0.01 * q + 0.03 * (q - 1))
    forward = BatchCache.forward

    def timed_forward(self, ids, *args, **kwargs):
        clock.now += clock.cost(*ids.shape)
        return forward(self, ids, *args, **kwargs)

    monkeypatch.setattr(BatchCache, "forward", timed_forward)
    monkeypatch.setattr(gate_module, "time", clock)
    return clock


def test_a_batch_policy_calibrates_by_the_time_between_two_reads(clock):
    """Each read times the passes since the last one (the first run excepted): `timed` gets their
    (q, rows, kv) and the seconds between the reads, which move the corrections (calibrate on)."""
    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3, 1, 2], [7, 1, 7]]
    heard = []
    policy = BatchPolicy(FLAT, 2, ["jacobi"], 3, PolicySettings(calibrate=True))
    timed = policy.timed
    policy.timed = lambda passes, seconds: heard.append((list(passes), seconds)) or timed(passes, seconds)
    result, _ = adaptive(model, batch, [12, 6], [BatchJacobi(3)], None, policy=policy, every=2)
    assert result.token_ids == greedy(model, batch, [12, 6])
    fed = result[0].stats.forward_tokens_per_step  # the first row decodes to the end: every pass's width
    passes = [p for passes, _ in heard for p in passes]
    assert [q for q, _, _ in passes] == fed[2 : 2 + len(passes)] and len(passes) >= len(fed) - 4  # the first run untimed
    assert all(seconds == pytest.approx(sum(clock.cost(rows, q) for q, rows, _ in run)) for run, seconds in heard)
    assert [rows for _, rows, _ in passes][-1] == 1 and all(a[2] < b[2] for a, b in zip(passes, passes[1:]))  # rows leave, kv grows
    assert policy.prices.corrections and all(c > 0 for c in policy.prices.corrections.values())  # FLAT: 10 ms a pass, dearer
    assert policy.prices.curve(1, 0) != FLAT.at(1).curve(0)


def test_calibration_stops_drafting_that_a_surface_prices_100x_too_cheap(clock):
    """A surface whose drafts cost a hundredth of what they do: the policy drafts on it as it is; calibrated,
    each run moving its width's correction a little, it stops after some steps."""
    surface = CostSurface.of(CostModel.from_times({1: 0.01, 2: 0.0008, 32: 0.0128}))  # t(q) / 100 past q = 1
    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3]]
    fed = {}
    for calibrate in (False, True):
        result, policy = adaptive(model, batch, 160, [BatchPromptLookup(4)], surface, calibrate=calibrate)
        assert result.token_ids == greedy(model, batch, [160])
        fed[calibrate] = result[0].stats.forward_tokens_per_step
    assert sum(q > 1 for q in fed[False][-30:]) > 25  # it drafts to the end
    assert fed[True][-30:] == [1] * 30 and max(fed[True]) > 1  # drafted, then stopped
    assert policy.prices.corrections[2] > 3  # the width's correction moved far past 1 (e^3 = 20x)


def test_calibration_is_off_unless_asked_and_moves_a_correction_by_at_most_one_a_run():
    prices = BatchPrices(FLAT, PolicySettings(), torch.device("cpu"))
    prices.timed([(1, 1, 0)], 100.0)
    assert prices.corrections == {} and prices.curve(1, 0) == FLAT.at(1).curve(0)  # off: the surface as it is
    prices = BatchPrices(FLAT, PolicySettings(calibrate=True, smoothing=0.5), torch.device("cpu"))
    t = FLAT.at(1).time(1, 0)
    prices.timed([(1, 1, 0)], 100.0 * t)
    assert prices.corrections == {1: 1.0, 0: 1.0}  # a first timing: all the way, but at most 1
    prices.timed([(1, 1, 0)], 100.0 * t)
    assert prices.corrections == {1: 1.5, 0: 1.5}  # then smoothing x at most 1
    prices.timed([(5, 1, 0)], 100.0 * FLAT.at(1).time(5, 0))
    assert prices.corrections[128] == 2.5 and prices.corrections[0] == 2.0  # a new bucket starts from the overall one
    curve = prices.curve(1, 0)
    assert curve[0] == pytest.approx(t * torch.e ** 1.5) and curve[4] == pytest.approx(FLAT.at(1).time(5, 0) * torch.e ** 2.5)
