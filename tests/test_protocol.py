"""The measurement protocol on synthetic timings: rounds, disturbed samples, flags, intervals, and repro."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from ladref.bench.protocol import (
    Protocol,
    Sample,
    bootstrap_interval,
    disturbed,
    figure,
    geometric_mean,
    rounds,
    settled,
    speedup,
    timed,
)
from ladref.bench.repro import compare, repro_markdown, slice_command

QUIET = Protocol(min_rounds=2, max_rounds=5, threads=2)


def _sample(step_ms: float, share: float = 0.95, steps: int = 10, load: float = 0.1) -> Sample:
    wall = step_ms * steps / 1e3
    return Sample(wall, share * wall * 2, load, steps)


def _fake(times: dict[str, list[Sample]]):
    """A measure that hands each method its next synthetic sample, and logs the order of calls."""
    feeds, order = {m: iter(s) for m, s in times.items()}, []

    def measure(method: str) -> Sample:
        order.append(method)
        return next(feeds[method])
    return measure, order


def test_steady_samples_take_the_minimum_rounds_interleaved_and_rotated():
    measure, order = _fake({"greedy": [_sample(50), _sample(51)], "lookahead": [_sample(30), _sample(30.5)]})
    samples = rounds(["greedy", "lookahead"], measure, QUIET, shift=1)
    assert order == ["lookahead", "greedy", "greedy", "lookahead"]  # rotated by the shift, then by the round
    assert all(len(s) == 2 and settled(s, QUIET) for s in samples.values())
    assert figure(samples["greedy"], QUIET).step_s == pytest.approx(0.050)  # the lower middle sample: one measured


def test_two_rounds_that_disagree_get_more_rounds_bounded():
    measure, order = _fake({"greedy": [_sample(50), _sample(60), _sample(50.5), _sample(49)]})
    samples = rounds(["greedy"], measure, QUIET)
    assert len(samples["greedy"]) == 3 and settled(samples["greedy"], QUIET)  # 50 and 50.5 agree: the 60 is off
    assert disturbed(samples["greedy"], QUIET) == [False, True, False]
    assert figure(samples["greedy"], QUIET).step_s == pytest.approx(0.050)
    wild = [_sample(t) for t in (50, 80, 35, 120, 20, 60)]
    measure, order = _fake({"greedy": wild})
    samples = rounds(["greedy"], measure, QUIET)
    assert len(samples["greedy"]) == QUIET.max_rounds and not settled(samples["greedy"], QUIET)  # flagged


def test_a_disturbed_sample_is_measured_again_and_flagged_if_it_stays_off():
    """The negative control: a sample whose threads waited for a core (low CPU share) is never the figure."""
    busy = _sample(50, share=0.3)  # same time, but the process got 30% of its cores: another process ran
    assert disturbed([busy, _sample(50), _sample(50)], QUIET) == [True, False, False]
    measure, _ = _fake({"m": [busy, _sample(50), _sample(50.2)]})
    samples = rounds(["m"], measure, QUIET)
    assert len(samples["m"]) == 3 and settled(samples["m"], QUIET)  # measured again, then settled
    measure, _ = _fake({"m": [_sample(50, share=0.3)] * 5})
    samples = rounds(["m"], measure, QUIET)
    assert len(samples["m"]) == 5 and not settled(samples["m"], QUIET)  # stayed off: flagged
    slow = [_sample(50), _sample(50.3), _sample(90)]  # one slow round among steady ones
    assert disturbed(slow, QUIET) == [False, False, True] and figure(slow, QUIET).step_s < 0.051
    assert not disturbed([_sample(50), _sample(50.3), _sample(90)], Protocol(off=1.0, threads=2))[2]  # the control's control


def test_timed_reads_wall_cpu_and_load_from_its_clocks():
    walls, cpus = iter([10.0, 12.0]), iter([5.0, 8.0])
    result, sample = timed(lambda: "done", clock=lambda: next(walls), cpu_clock=lambda: next(cpus), load=lambda: 1.5)
    assert result == "done" and sample == Sample(2.0, 3.0, 1.5, 1)
    assert sample.share(2) == pytest.approx(0.75)


def test_geometric_mean_and_bootstrap_interval():
    assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    values = [1.1, 1.3, 0.9, 1.2, 1.05, 1.4]
    low, high = bootstrap_interval(values)
    assert low < geometric_mean(values) < high and bootstrap_interval(values) == (low, high)  # a fixed seed
    assert bootstrap_interval([1.0] * 6) == (1.0, 1.0) and bootstrap_interval([2.0]) == (2.0, 2.0)
    wide = bootstrap_interval([0.5, 2.0, 0.6, 1.8, 0.7, 1.5])
    assert wide[1] - wide[0] > high - low  # more spread between prompts, a wider interval
    with pytest.raises(ValueError, match="positive"):
        geometric_mean([1.0, 0.0])


def test_speedup_per_prompt_and_pooled():
    s = speedup([(10, 1.0), (10, 4.0)], [(10, 2.0), (10, 2.0)])  # per prompt 2x and 0.5x
    assert s.geomean == pytest.approx(1.0) and s.pooled == pytest.approx(4 / 5) and s.prompts == 2
    assert s.text().startswith("1.00x [")
    with pytest.raises(ValueError, match="same prompts"):
        speedup([(10, 1.0)], [])


def test_protocol_validation():
    with pytest.raises(ValueError, match="min_rounds"):
        Protocol(min_rounds=3, max_rounds=2)
    with pytest.raises(ValueError, match="threads"):
        Protocol(threads=0)
    with pytest.raises(ValueError, match="at least one method"):
        rounds([], lambda m: _sample(1), QUIET)


def _records(times: dict[str, list[float]], tokens: int = 64, steps: int = 40) -> list[dict]:
    return [{"prompt_id": str(i), "method": m, "new_tokens": tokens, "wall_s": t, "flagged": False, "steps": steps}
            for m, ts in times.items() for i, t in enumerate(ts)]


def test_repro_compares_the_same_prompts_over_the_same_baseline():
    committed = _records({"generate": [2.0, 2.0, 2.0, 2.0], "greedy": [1.6, 1.7, 1.5, 1.6], "lookahead": [1.0, 1.2, 0.9, 1.1]})
    rerun = _records({"generate": [2.1, 2.1], "greedy": [1.7, 1.8], "lookahead": [1.05, 1.25]})
    base, rows = compare(committed, rerun)
    assert base == "generate" and [r.method for r in rows] == ["greedy", "lookahead"]
    look = rows[1]
    assert look.prompts == 2 and look.committed.geomean == pytest.approx(math.sqrt(2.0 / 1.0 * 2.0 / 1.2))
    assert look.ratio == pytest.approx(look.rerun.geomean / look.committed.geomean) and look.inside
    far = compare(committed, _records({"generate": [2.0, 2.0], "greedy": [1.6, 1.7], "lookahead": [3.0, 3.0]}))[1][1]
    assert not far.inside and far.ratio < 0.5  # a rerun far off is reported as such
    text = repro_markdown(base, rows, {"git_commit": "a" * 40, "machine": "AMD EPYC, 2 torch threads"}, {"git_commit": "b" * 40})
    assert "| lookahead |" in text and "| yes |" in text and "`aaaaaaa`" in text
    json.dumps([r.method for r in rows])
    learned = _records({"generate": [2.0, 2.0], "greedy": [1.6, 1.7], "lookahead": [1.0, 1.2]}, steps=30)
    other = compare(committed, learned)[1][1]
    assert not other.same_work and "not the same work" in repro_markdown("generate", [other], {}, {})
    with pytest.raises(ValueError, match="no prompt '9'"):
        compare(committed, [dict(r, prompt_id="9") for r in rerun])


def test_slice_command_keeps_the_command_with_a_smaller_limit():
    command = "python -m ladref bench --no-progress --dataset specbench --limit 4 --threads 2 --out benchmarks/results/specbench"
    assert slice_command(command, 1, "/tmp/x") == ["--no-progress", "--dataset", "specbench", "--threads", "2",
                                                   "--limit", "1", "--out", "/tmp/x"]
    with pytest.raises(ValueError, match="not a `python -m ladref bench` command"):
        slice_command("python -m ladref demo", 1, "/tmp/x")


def test_rotation_gives_every_method_every_place():
    firsts = set()
    for shift in range(3):
        measure, order = _fake({m: [_sample(10)] * 2 for m in "abc"})
        rounds(list("abc"), measure, QUIET, shift=shift)
        firsts.add(order[0])
    assert firsts == set("abc") and list(itertools.islice("abc", 1)) == ["a"]


def test_quiet_probe_says_what_makes_a_machine_busy():
    from ladref.bench.quiet import MachineState

    quiet = MachineState(load=0.1, share=0.98, step_ms=45.0, spread=1.05, threads=2)
    assert quiet.busy_reasons() == [] and quiet.as_dict()["busy"] == []
    busy = MachineState(load=1.4, share=0.65, step_ms=140.0, spread=1.9, threads=2)  # a core spinning beside it
    why = busy.busy_reasons()
    assert len(why) == 3 and "load average is 1.40" in why[0] and "65% of 2 cores" in why[1] and "1.90x" in why[2]


def test_bench_rows_time_rounds_and_learning_rows_restart_each_round():
    import torch
    from strategies import tiny_model

    from ladref import LookaheadConfig
    from ladref.bench.measure import BenchSettings, run_bench

    model = tiny_model("llama", 16, 1)
    prompts = [torch.tensor([3, 5, 7, 3, 5, 7, 3, 5]), torch.tensor([9, 2, 9, 2, 9, 2])]
    settings = BenchSettings(("suffix_memory", "lookahead"), LookaheadConfig(2, 3, 2), max_new_tokens=8)
    records = run_bench(model, prompts, settings)
    assert all(len(r.rounds_s) >= 2 and len(r.cpu_shares) == len(r.rounds_s) == len(r.disturbed) for r in records)
    assert all(r.match and r.wall_s in r.rounds_s and sum(r.accepted.values()) == r.steps for r in records)
    assert all(r.peak_mem_mib > 0 for r in records)
    row = next(r for r in settings.methods_for(model, prompts) if r.label == "suffix_memory")
    row.run(model, prompts[0], 8)
    restore = row.checkpoint()
    before = row.run(model, prompts[1], 8)
    row.run(model, prompts[1], 8)  # the memory now holds that output twice
    restore()
    assert row.run(model, prompts[1], 8).stats.accepted_per_step == before.stats.accepted_per_step  # as it started
    learning = BenchSettings(("compiled_adaptive_all",), LookaheadConfig(2, 3, 2), max_new_tokens=8, compile_mode=None)
    with pytest.raises(ValueError, match="compiled_adaptive_all learn across calls"):
        run_bench(model, prompts, learning)


def test_check_refuses_results_from_two_machines_or_a_busy_one(tmp_path):
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import headline  # noqa: PLC0415
    finally:
        sys.path.remove(str(root / "benchmarks"))
    meta = {"git_commit": "a" * 40, "torch": "2", "transformers": "5", "command": "x", "machine": "AMD EPYC, 2 torch threads"}
    for name, machine in (("one", "AMD EPYC, 2 torch threads"), ("two", "AMD EPYC, 1 torch threads")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "r.json").write_text(json.dumps({"meta": dict(meta, machine=machine)}))
    assert headline.mixed_machines(tmp_path) is None  # one CPU model, another thread count: one machine
    (tmp_path / "two" / "r.json").write_text(json.dumps({"meta": dict(meta, machine="Intel(R) Xeon(R) Processor, 2 torch threads")}))
    assert "Intel(R) Xeon(R) Processor: two/r.json" in headline.mixed_machines(tmp_path)
    assert headline.render_all(tmp_path, tmp_path) == 1  # refused before writing anything
    assert not (tmp_path / "headline.md").exists()
    busy = dict(meta, machine_state={"load": 1.2, "share": 0.6, "busy": ["the 1-minute load average is 1.20"]})
    (tmp_path / "two" / "r.json").write_text(json.dumps({"meta": busy}))
    (tmp_path / "README.md").write_text("")
    assert "Measured on a busy machine (--force)" in headline.stamp(busy)
    assert any("busy machine" in p for p in headline.problems(tmp_path, tmp_path))


def _current(monkeypatch, results):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "current.py"
    spec = importlib.util.spec_from_file_location("current_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", results)
    return module


def test_current_names_a_bad_benchmark_and_a_missing_result(monkeypatch, tmp_path, capsys):
    current = _current(monkeypatch, tmp_path)
    assert current.main(["run", "specbnch"]) == 2 and "unknown benchmark specbnch; choose from" in capsys.readouterr().err
    assert current.main(["repro", "load"]) == 2 and "repro: name a benchmark timed prompt by prompt" in capsys.readouterr().err
    assert current.main(["repro", "specbench"]) == 2
    assert "no committed result in benchmarks/results/specbench/" in capsys.readouterr().err
    assert current.main(["bench"]) == 2 and "Usage" in capsys.readouterr().err
