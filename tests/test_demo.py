"""The demo's logic without a model: the probe, the token plan and the interleaved rounds on fake
timers and fake decoders, and its reading of noisy cost curves."""

import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ladref.bench.demo import gpu_expectation
from ladref.bench.demo_rounds import (
    BUSY_TOKENS,
    DEFAULT_TOKENS,
    MIN_TOKENS,
    OutOfTime,
    Probe,
    StepTimes,
    plan_tokens,
    probe,
    thread_fit,
    timed_rounds,
)
from ladref.bench.demo_verdict import curve_noise, draft_cost_line, monotone_fit, verdict, withheld
from ladref.pricing.cost import CostModel
from ladref.results import DecodeResult, DecodeStats

PROMPT = torch.tensor([[1, 2, 3]])


class FakeClock:
    """Wall and CPU time that advance only when a fake decoder says so."""

    def __init__(self, cpu_share: float = 1.0, threads: int = 2) -> None:
        self.now, self.cpu, self.rate = 0.0, 0.0, cpu_share * threads

    def __call__(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.cpu

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.cpu += seconds * self.rate


def fake_decoder(clock: FakeClock, seconds_per_token, calls: list, name: str):
    """A decoder whose every token takes `seconds_per_token(call number)` (a float, or a list, one per token)."""

    def decode(prompt, tokens, tokenizer, streamer):
        calls.append(name)
        step = seconds_per_token(len([c for c in calls if c == name]))
        steps = step if isinstance(step, list) else [step] * tokens
        start = clock()
        streamer.put(prompt)
        for seconds in steps[:tokens]:
            clock.advance(seconds)
            streamer.put(torch.tensor([0]))
        stats = DecodeStats()
        for _ in range(tokens):
            stats.record(1, 1)
        stats.wall_time_s = clock() - start
        return DecodeResult([0] * tokens, None, stats, name)

    return decode


def decoders(clock: FakeClock, speeds: dict, calls: list) -> dict:
    return {name: fake_decoder(clock, speed, calls, name) for name, speed in speeds.items()}


def test_a_noisy_curve_gives_no_negative_or_made_up_threshold():
    noisy = CostModel.from_ratios({1: 1.0, 2: 0.9, 4: 1.5, 8: 1.4, 16: 2.1, 32: 2.5})  # t(2) < t(1), t(8) < t(4)
    assert monotone_fit([1.0, 0.9, 1.5, 1.4, 2.1]) == pytest.approx([0.95, 0.95, 1.45, 1.45, 2.1])
    assert curve_noise([1.0, 0.9, 1.5, 1.4]) == pytest.approx(0.1) and curve_noise([1, 2, 2, 3]) == 0.0
    line = draft_cost_line(noisy, 0)
    shown = [float(x) for x in re.findall(r"t\(\d+\) = (-?[\d.]+)", line)]
    assert shown == sorted(shown) and min(shown) >= 1.0 and not re.search(r"-\d", line)
    assert "falls by up to 10%" in line and "no threshold for a draft is given" in line and "pays only if" not in line
    clean = draft_cost_line(CostModel.from_ratios({1: 1.0, 2: 1.3, 4: 1.5}), 0)
    assert "about 0.30 more accepted tokens than none" in clean and "fitted" not in clean
    slight = draft_cost_line(CostModel.from_ratios({1: 1.0, 2: 1.4, 4: 1.35, 8: 2.0}), 0)  # noise 4%, a draft costs 0.38
    assert "falls by up to 4%" in slight and "about 0.38 more accepted tokens" in slight
    assert "t(2) equals t(1)" in draft_cost_line(CostModel.flat(64), 0)


def test_the_verdict_reads_the_fitted_curve():
    stats = DecodeStats()
    for _ in range(4):
        stats.record(2, 16)  # S = 2 with 16-token steps
    result, gpu = DecodeResult([0] * 8, None, stats, "lookahead"), SimpleNamespace(device=torch.device("cuda"))
    line = verdict(gpu, result, CostModel.from_ratios({1: 1.0, 2: 0.9, 16: 0.95}), 1.8, 2.0, 10)  # flat but noisy
    assert "a 16-token step costs 1.0 one-token steps" in line and "S > 1.0" in line and "expect about 2.00x" in line


def test_the_probe_reads_step_times_and_the_cpu_share():
    clock, calls = FakeClock(cpu_share=0.95), []
    greedy = fake_decoder(clock, lambda _: [0.1] * 9 + [0.3] * 7, calls, "greedy")  # 8 steps of 0.1 s, 7 of 0.3 s
    found = probe(greedy, PROMPT, 16, threads=2, clock=clock, cpu_clock=clock.process_time)
    assert found.step_s == pytest.approx(0.1) and found.share == pytest.approx(0.95) and found.spread == pytest.approx(3.0)
    assert found.busy(None) == ["one-token steps varied 3.00x between quartiles"]
    steady = Probe(0.1, 1.05, 0.9)
    assert steady.busy(None) == [] and steady.busy(0.12) == [] and Probe(0.1, 1.05, None).busy(None) == []
    assert steady.busy(0.05) == ["a one-token step took 100 ms against 50 ms in the stored cost curve"]
    assert Probe(0.1, 1.05, 0.45).busy(None) == ["its threads got 45% of the CPU time an idle machine gives them"]
    clock = FakeClock(cpu_share=0.5)  # a busy machine: 3 s steps, the probe stops after 8 s (the prefill's token and 2 steps)
    slow = probe(fake_decoder(clock, lambda _: 3.0, calls, "greedy"), PROMPT, 16, threads=2, clock=clock, cpu_clock=clock.process_time)
    assert clock() == pytest.approx(9.0) and slow.step_s == pytest.approx(3.0) and slow.share == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least 3 tokens"):
        probe(greedy, PROMPT, 2, threads=None)


def test_threads_that_wait_for_cores_are_cut_to_the_share_they_got():
    assert thread_fit(Probe(0.1, 1.0, 0.5), 2) == 1 and thread_fit(Probe(0.1, 1.0, 0.3), 2) == 1  # at least one
    assert thread_fit(Probe(0.1, 1.0, 0.45), 8) == 3 and thread_fit(Probe(0.1, 1.0, 0.9), 2) == 2  # steady: kept
    assert thread_fit(Probe(0.1, 1.0, None), 4) == 4 and thread_fit(Probe(0.1, 1.0, 0.2), 1) == 1  # off a CPU; one already


def test_a_streamer_stops_a_call_past_the_deadline():
    clock = FakeClock()
    times = StepTimes(clock, deadline=1.0)
    times.put(PROMPT)
    clock.advance(0.6)
    times.put(torch.tensor([1]))
    clock.advance(0.6)
    with pytest.raises(OutOfTime):
        times.put(torch.tensor([2]))
    assert times.intervals() == pytest.approx([0.6]) and StepTimes(clock).deadline == math.inf


def test_the_token_plan_fits_two_rounds_in_the_time_left():
    assert plan_tokens(None, False, 0.03, 100) == DEFAULT_TOKENS and plan_tokens(None, True, 0.03, 250) == BUSY_TOKENS
    assert plan_tokens(None, True, 0.5, 100) == 22  # (100 s - a warm-up of 20 steps) / (2 rounds x 4 steps a token x 0.5 s)
    assert plan_tokens(None, True, 5.0, 100) == MIN_TOKENS and plan_tokens(128, True, 5.0, 10) == 128  # asked for: kept


def test_steady_rounds_stop_once_two_agree_and_alternate_their_order():
    clock, calls = FakeClock(), []
    fakes = decoders(clock, {"greedy": lambda _: 0.1, "lookahead": lambda _: 0.125, "adaptive": lambda _: 0.08}, calls)
    said = []
    rounds = timed_rounds(fakes, PROMPT, 10, 3, deadline=100, clock=clock, say=said.append)
    assert len(rounds.times) == 2 and "agree within 5%" in rounds.stop
    assert calls == ["greedy", "lookahead", "adaptive", "adaptive", "lookahead", "greedy"]
    assert rounds.ratios("lookahead") == pytest.approx([0.8, 0.8]) and rounds.spread() == pytest.approx(1.0)
    assert said[0] == "  round 1: greedy 1.0 s; lookahead 1.2 s; adaptive 0.8 s (lookahead 0.80x, adaptive 1.25x greedy's speed)"
    assert withheld(rounds, None, Path("cost.json")) is None


def test_rounds_that_disagree_give_no_verdict():
    clock, calls = FakeClock(), []
    slow_second = {"greedy": lambda _: 0.1, "lookahead": lambda n: 0.2 if n == 2 else 0.125, "adaptive": lambda _: 0.08}
    rounds = timed_rounds(decoders(clock, slow_second, calls), PROMPT, 10, 3, deadline=100, clock=clock, say=print)
    assert len(rounds.times) == 3 and rounds.stop == "3 rounds" and rounds.fastest() != 1  # not the slow round
    assert rounds.ratios("lookahead") == pytest.approx([0.8, 0.5, 0.8]) and rounds.spread() == pytest.approx(1.6)
    why = withheld(rounds, None, Path("cost.json"))
    assert why.startswith("no speed verdict: the speed-ups differ by 60% between rounds")
    steady = rounds.__class__(rounds.times[:1] * 2, rounds.results[:1] * 2, "2 rounds")
    curve = withheld(steady, "greedy 3.00 s against 1.00 s", Path("cost.json"))
    assert curve.startswith("no speed verdict: the timings disagree with this machine's cost curve") and "delete cost.json" in curve
    assert "delete" not in withheld(steady, "greedy 3.00 s against 1.00 s", None)  # a curve for this run only: nothing to delete


def test_rounds_keep_to_the_deadline_but_the_first_always_ends():
    clock, calls = FakeClock(), []
    steady = {"greedy": lambda _: 1.0, "lookahead": lambda _: 1.0, "adaptive": lambda _: 1.0}
    rounds = timed_rounds(decoders(clock, steady, calls), PROMPT, 10, 3, deadline=5, clock=clock, say=print)
    assert len(rounds.times) == 1 and clock() == 30 and "no time for round 2" in rounds.stop  # round 1 ran past the deadline whole
    why = withheld(rounds, None, None)
    assert why.startswith("no speed verdict from a single round (no time for round 2")
    clock, calls = FakeClock(), []
    slower = {"greedy": lambda n: 1.0 if n == 1 else 2.5, "lookahead": lambda _: 1.0, "adaptive": lambda _: 1.0}
    rounds = timed_rounds(decoders(clock, slower, calls), PROMPT, 10, 3, deadline=70, clock=clock, say=print)
    assert len(rounds.times) == 1 and "round 2 ran past the demo's time limit and was dropped" in rounds.stop
    assert clock() == pytest.approx(72.5) and calls == ["greedy", "lookahead", "adaptive", "adaptive", "lookahead", "greedy"]
    clock, calls = FakeClock(), []  # a busy machine's first round has a limit too: then no round at all
    rounds = timed_rounds(decoders(clock, steady, calls), PROMPT, 10, 2, deadline=5, first_deadline=15, clock=clock, say=print)
    assert rounds.times == [] and "round 1 ran past" in rounds.stop and clock() == pytest.approx(16.0)


def test_the_gpu_line_points_to_the_gpu_results(tmp_path):
    line = gpu_expectation(tmp_path)
    assert "docs/gpu.md and benchmarks/results_gpu/summary.md" in line and "no GPU results" not in line
    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results_gpu"
    if any(committed.glob("*.json")):
        assert "NVIDIA H200" in gpu_expectation(committed) and "x greedy" in gpu_expectation(committed)
