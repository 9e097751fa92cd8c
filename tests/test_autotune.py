"""Auto-tuning (ladref.bench.autotune): forward-cost curve, prediction and the never-slower rule."""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model

from ladref import LookaheadConfig
from ladref.bench.autotune import (
    TuneRow,
    choose_config,
    interpolate_cost,
    measure_forward_cost,
    recommend,
)


def test_interpolation_is_exact_at_samples_and_linear_between():
    costs = {1: 1.0, 4: 1.0, 16: 4.0}
    assert [interpolate_cost(costs, q) for q in (1, 4, 16)] == [1.0, 1.0, 4.0]
    assert interpolate_cost(costs, 10) == pytest.approx(2.5)
    assert interpolate_cost(costs, 28) == pytest.approx(7.0)  # linear extrapolation of the last segment
    assert interpolate_cost({8: 2.0}, 4) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        interpolate_cost({}, 3)


def _row(w, predicted, measured, match=True):
    return TuneRow(LookaheadConfig(w, 3, w), 1.5, 4.0 * w, predicted, measured, match)


def test_choice_is_the_fastest_measured_and_never_slower_than_greedy():
    rows = [_row(2, 3.0, 0.9), _row(4, 2.0, 1.1), _row(8, 2.5, 1.05), _row(6, 9.0, 1.5, match=False)]
    config, reason = choose_config(rows)
    assert config == LookaheadConfig(4, 3, 4) and "measured 1.10x" in reason  # what decoding paid, not the prediction
    config, reason = choose_config([_row(2, 3.0, 0.9), _row(4, 5.0, 1.0)])
    assert config is None and "greedy" in reason


def test_half_precision_near_ties_do_not_disqualify_a_config():
    rows = [_row(4, 2.0, 1.1), _row(6, 9.0, 1.5, match=False)]
    assert choose_config(rows, exact=True)[0] == LookaheadConfig(4, 3, 4)  # float32: a mismatch is a bug
    assert choose_config(rows, exact=False)[0] == LookaheadConfig(6, 3, 6)  # float16: a flipped near-tie


def test_every_timed_pass_has_a_shape_decoding_has_not_warmed():
    model = tiny_model("llama", 8, 1)
    shapes = []
    handle = model.register_forward_pre_hook(
        lambda m, args, kw: shapes.append((kw["input_ids"].shape[-1], kw.get("cache", kw.get("past_key_values")).get_seq_length())), with_kwargs=True)
    try:
        measure_forward_cost(model, (1, 4, 8), context=20, repeats=3)
    finally:
        handle.remove()
    steps = [shape for shape in shapes if shape[0] in (1, 4, 8)]  # not the prefill
    assert shapes[0] == (23, 0) and len(steps) == 12 and len(set(steps)) == 12  # 9 timed + 1 warm-up per width
    assert {past for _, past in steps} == {20, 21, 22, 23}  # timed at 20..22, warmed up at 23


def test_forward_cost_and_recommendation_on_a_tiny_model():
    model = tiny_model("llama", 8, 1)
    costs = measure_forward_cost(model, (1, 8, 2), context=5, repeats=1)
    assert sorted(costs) == [1, 2, 8] and all(t > 0 for t in costs.values())
    prompts = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])]
    configs = [LookaheadConfig(2, 3, 2), LookaheadConfig(4, 4, 4)]
    rec = recommend(model, prompts, configs, max_new_tokens=12, block_sizes=(1, 4, 16))
    assert [r.config for r in rec.rows] == configs and all(r.match for r in rec.rows)
    assert all(r.compression >= 1 and r.predicted_speedup > 0 and r.measured_speedup > 0 for r in rec.rows)
    if rec.config is None:
        assert all(r.measured_speedup <= 1 for r in rec.rows)
    else:
        assert next(r for r in rec.rows if r.config == rec.config).measured_speedup > 1
    with pytest.raises(ValueError, match="each block size q must be >= 1"):
        measure_forward_cost(model, (0,))
    messages = []
    recommend(model, prompts, configs[:1], max_new_tokens=4, block_sizes=(1, 4), progress=messages.append)
    assert messages[0].startswith("forward cost t(q)") and "W=2 N=3 G=2: S=" in messages[1]
    with pytest.raises(TypeError):
        recommend(model, prompts, [(2, 3, 2)])
