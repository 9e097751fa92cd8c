"""The cost model (ladref.pricing.cost): validation, interpolation, measuring real steps, the session cache.

No timing is asserted (timed tests are flaky on a shared machine): the measured values are only
checked to be positive and finite; what the curve looks like is a benchmark's business.
"""

from __future__ import annotations

import math

import pytest
import torch
from strategies import build_tiny, tiny_model

from ladref.pricing.cost import CPU_WIDTHS, CostModel, default_widths
from ladref.pricing.cost_cache import CostCache
from ladref.runner import ModelRunner
from ladref.fast.static import StaticRunner

pytestmark = pytest.mark.usefixtures("one_thread")

# t(q)/t(1) measured through ModelRunner.forward on a 2-thread CPU, float32 SmolLM2-135M, 300 cached tokens
CPU_SHAPED = {1: 1.0, 2: 2.1, 4: 2.0, 8: 2.2, 16: 2.3, 32: 2.5, 64: 3.7}


def count_passes(model):
    """A list that grows by one (q, past) per forward pass of `model`, and the hook's handle."""
    shapes = []
    handle = model.register_forward_pre_hook(
        lambda m, args, kw: shapes.append((kw["input_ids"].shape[-1], kw.get("cache", kw.get("past_key_values")).get_seq_length())), with_kwargs=True)
    return shapes, handle


@pytest.mark.parametrize("widths, kv, seconds, match", [
    ((), (0,), ((),), "empty: no widths"),
    ((1, 2), (), (), "empty: no kv_lengths"),
    ((1, 4, 2), (0,), ((1.0, 1.0, 1.0),), "widths must be strictly increasing"),
    ((1, 2, 2), (0,), ((1.0, 1.0, 1.0),), "widths must be strictly increasing"),
    ((1, 2), (512, 128), ((1.0, 1.0), (1.0, 1.0)), "kv_lengths must be strictly increasing"),
    ((2, 4), (0,), ((1.0, 1.0),), "widths must start at 1"),
    ((0, 1), (0,), ((1.0, 1.0),), "each of widths must be >= 1"),
    ((1, 2), (0,), ((1.0, 0.0),), r"t\(q=2, kv=0\) = 0.0"),
    ((1, 2), (0,), ((-1.0, 1.0),), r"t\(q=1, kv=0\) = -1.0"),
    ((1, 2), (0,), ((1.0, math.nan),), "positive, finite"),
    ((1, 2), (0,), ((1.0, math.inf),), "positive, finite"),
    ((1, 2), (0,), ((1.0, "2"),), "positive, finite"),
    ((1, 2), (0, 8), ((1.0, 2.0),), "2 rows"),
    ((1, 2), (0,), ((1.0, 2.0, 3.0),), "of 2 times"),
])
def test_bad_curves_are_refused_by_name(widths, kv, seconds, match):
    with pytest.raises(ValueError, match=match):
        CostModel(widths, kv, seconds)


def test_interpolation_in_width_and_kv_length():
    cost = CostModel((1, 2, 8), (100, 300), ((1.0, 2.0, 5.0), (3.0, 4.0, 9.0)))
    assert cost.time(2, kv=100) == 2.0 and cost.time(8, kv=300) == 9.0  # exact at measured points
    assert cost.time(5, kv=100) == pytest.approx(3.5)  # halfway between q=2 and q=8
    assert cost.time(1, kv=200) == pytest.approx(2.0)  # halfway between the KV lengths
    assert cost.time(5, kv=200) == pytest.approx((3.5 + 6.5) / 2)
    assert cost.time(1.5, kv=100) == pytest.approx(1.5)  # a mean width may be fractional
    assert cost.time(2, kv=0) == 2.0 and cost.time(2, kv=10_000) == 4.0  # nearest KV length outside the range
    assert cost.relative(8, kv=100) == pytest.approx(5.0) and cost.relative(8, kv=300) == pytest.approx(3.0)
    assert cost.times(kv=200) == pytest.approx({1: 2.0, 2: 3.0, 8: 7.0})
    assert cost.tokens_per_second(3.0, 8, kv=300) == pytest.approx(3.0 / 9.0)
    assert cost.max_width == 8
    assert cost.curve(kv=200) == pytest.approx([cost.time(q, kv=200) for q in range(1, 9)])  # every width, read once


def test_out_of_range_queries_are_refused():
    cost = CostModel((1, 2, 8), (100, 300), ((1.0, 2.0, 5.0), (3.0, 4.0, 9.0)))
    with pytest.raises(ValueError, match=r"q=9 is outside the widths measured, 1..8"):
        cost.time(9, kv=100)
    for q in (0, 0.5, math.nan, True):
        with pytest.raises(ValueError, match="outside the widths measured"):
            cost.time(q, kv=100)
    with pytest.raises(ValueError, match="measured at KV lengths"):
        cost.time(2)  # several KV lengths: which one must be said
    with pytest.raises(ValueError, match="kv"):
        cost.time(2, kv=-1)
    assert CostModel.from_times({1: 1.0, 4: 2.0}).time(4) == 2.0  # one KV length: kv may be omitted


def test_synthetic_flat_and_cpu_shaped_curves():
    flat = CostModel.flat(max_width=256)
    assert flat.max_width == 256 and flat.widths[:3] == (1, 2, 4)
    assert all(flat.relative(q) == pytest.approx(1.0) for q in (1, 7, 100, 256))
    assert CostModel.flat(max_width=100).widths[-2:] == (64, 100)
    cpu = CostModel.from_ratios(CPU_SHAPED, step_s=0.06)
    assert cpu.relative(2) == pytest.approx(2.1) and cpu.relative(64) == pytest.approx(3.7)
    assert cpu.relative(3) == pytest.approx(2.05) and cpu.time(1) == pytest.approx(0.06)
    with pytest.raises(ValueError, match="outside the widths measured, 1..64"):
        cpu.time(120)
    with pytest.raises(ValueError, match=r"t\(q=2, kv=0\)"):
        CostModel.from_ratios({1: 1.0, 2: -2.0})
    with pytest.raises(ValueError, match="empty"):
        CostModel.from_times({})


def test_json_round_trip(tmp_path):
    cost = CostModel((1, 2, 8), (100, 300), ((1.0, 2.0, 5.0), (3.0, 4.0, 9.0 + 1e-9)), label="made up")
    assert CostModel.from_dict(cost.to_dict()) == cost
    path = cost.save(tmp_path / "sub" / "cost.json", meta={"command": "test"})
    assert CostModel.load(path) == cost
    with pytest.raises(ValueError, match="unknown keys"):
        CostModel.from_dict(dict(cost.to_dict(), extra=1))
    with pytest.raises(ValueError, match="missing"):
        CostModel.from_dict({"widths": [1]})


def test_measuring_a_tiny_model_times_every_width_and_rolls_the_cache_back():
    model = build_tiny("llama", 16, 0).float()
    runner = ModelRunner(model)
    shapes, handle = count_passes(model)
    calls = []
    try:
        cost = CostModel.measure(model, widths=(1, 2, 5), kv_lengths=(8, 20), repeats=3, runner=runner,
                                 progress=lambda done, total: calls.append((done, total)))
    finally:
        handle.remove()
    assert cost.widths == (1, 2, 5) and cost.kv_lengths == (8, 20)
    assert all(t > 0 and math.isfinite(t) for row in cost.seconds for t in row)
    assert runner.past_len == 0  # rolled back: the runner is as it was
    assert shapes[0] == (23, 0)  # one prefill of max(kv) + repeats tokens
    steps = shapes[1:]  # a warm-up per width at length 23, then each width at 22, 21, 20 and 10, 9, 8
    assert len(steps) == 3 * (1 + 2 * 3) and len(set(steps)) == len(steps)  # every pass has a shape of its own
    assert {past for _, past in steps} == {23, 22, 21, 20, 10, 9, 8}
    assert calls[-1] == (21, 21) and len(calls) == 21
    assert "ModelRunner" in cost.label and "float32" in cost.label and "threads" in cost.label


def test_measuring_a_static_runner():
    model = tiny_model("llama", 16, 0)
    runner = StaticRunner(model, max_length=32)
    cost = CostModel.measure(model, widths=(1, 4), kv_lengths=(10,), repeats=2, runner=runner)
    assert all(t > 0 for t in cost.times().values()) and runner.past_len == 0 and "StaticRunner" in cost.label


def test_bad_measurements_are_refused_by_name():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match="widths must start at 1"):
        CostModel.measure(model, widths=(2, 4), kv_lengths=(8,))
    with pytest.raises(ValueError, match="kv_lengths must be strictly increasing"):
        CostModel.measure(model, widths=(1, 2), kv_lengths=(16, 8))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        CostModel.measure(model, widths=(1, 2), kv_lengths=(600,))
    runner = ModelRunner(model)
    runner.forward(torch.arange(4))
    with pytest.raises(ValueError, match="empty cache, this one holds 4 tokens"):
        CostModel.measure(model, widths=(1, 2), kv_lengths=(8,), runner=runner)
    assert default_widths(torch.device("cpu")) == CPU_WIDTHS and default_widths(torch.device("cuda"))[-1] == 256


def test_the_session_cache_measures_once(tmp_path):
    model = tiny_model("llama", 16, 0)
    cache = CostCache(tmp_path / "costs.json")
    shapes, handle = count_passes(model)
    try:
        first = cache.get(model, widths=(1, 3), kv_lengths=(6,), repeats=1)
        passes = len(shapes)
        again = cache.get(model, widths=(1, 3), kv_lengths=(6,), repeats=1)
        assert again is first and len(shapes) == passes > 0  # nothing measured the second time
        other = cache.get(model, widths=(1, 2), kv_lengths=(6,), repeats=1)  # another grid: measured
        assert len(shapes) > passes and other is not first and len(cache) == 2
        reloaded = CostCache(tmp_path / "costs.json")  # a later process reads the file and measures nothing
        count = len(shapes)
        assert reloaded.get(model, widths=(1, 3), kv_lengths=(6,), repeats=1) == first and len(shapes) == count
    finally:
        handle.remove()
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a ladref.cost/1 cache"):
        CostCache(tmp_path / "bad.json")


def test_the_bench_command_prints_and_plots_a_curve(tmp_path):
    import argparse

    from ladref.bench.benchmark import add_arguments
    from ladref.bench.cost import cost_lines, plot_cost

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--cost", "--widths", "1,2,4", "--kv-lengths", "64,256"])
    assert args.cost and args.widths == (1, 2, 4) and args.kv_lengths == (64, 256) and args.figure is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--cost", "--widths", "1,two"])
    cost = CostModel((1, 2, 4), (64, 256), ((0.05, 0.1, 0.1), (0.06, 0.12, 0.15)))
    lines = cost_lines(cost)
    assert "| 2 | 100.0 | 2.00 | 20 |" in lines and "| 4 | 150.0 | 2.50 | 27 |" in lines
    assert lines.count("| q | t(q) ms | t(q)/t(1) | q/t(q) tok/s |") == 2
    path = plot_cost(cost, tmp_path / "figs" / "cost.png", "a made-up curve")
    assert path.is_file() and path.stat().st_size > 1000


def test_a_curve_is_measured_in_protocol_rounds_and_one_that_never_settles_is_flagged():
    from ladref.bench.cost import cost_protocol, curve_rounds
    from ladref.bench.protocol import Protocol
    from ladref.pricing.surface import CostSurface

    model = tiny_model("llama", 16, 0)
    measured = []

    def measure():
        measured.append(CostModel.measure(model, (1, 2), (4, 8), repeats=2))
        return measured[-1]

    curve, record = curve_rounds(measure, cost_protocol(threads=1))
    assert curve in measured and len(record["rounds_s"]) == len(measured) >= 2 and record["worst_cell_spread"] >= 1.0
    assert len(record["cpu_shares"]) == len(record["loads"]) == len(record["disturbed"]) == len(measured)
    # negative control: a CPU share no measurement reaches disturbs every round: the most rounds, flagged
    surface, busy = curve_rounds(lambda: CostSurface.measure(model, (1, 2), (1, 2), (4,), repeats=1), Protocol(max_rounds=3, min_share=5.0))
    assert busy["flagged"] and busy["disturbed"] == [True] * 3 and surface.batches == (1, 2)


def test_a_cells_figure_is_its_fastest_pass():
    """A busy moment only adds time: each (q, kv) keeps its fastest timed pass, not the median, and
    the untimed first pass per width (one-off work) counts for nothing."""
    from ladref.pricing.timing import _run_plan

    busy = {(13, 1): 50.0, (12, 1): 9.0, (11, 1): 8.0}  # the untimed pass and two of q = 1's three are disturbed
    seconds = _run_plan((1, 2), (10,), 3, lambda length, q: busy.get((length, q), q + length / 1000), None)
    assert seconds == [[pytest.approx(1.010), pytest.approx(2.010)]]
