"""The cost surface t(q, kv, B): one measured curve per batch size, between them and past them."""

from __future__ import annotations

import pytest
from strategies import tiny_model

import ladref.pricing.timing as timing
from ladref import greedy_decode
from ladref.fast.adaptive import AdaptiveDecoder
from ladref.pricing.cost import CostModel
from ladref.pricing.cost_cache import CostCache
from ladref.pricing.surface import CostSurface, batch_curve, batches_up_to, cached_surface

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_roofline_surface_is_weight_bound_below_the_ridge_and_compute_bound_above():
    cpu = CostSurface.roofline(0.015, 0.0015, widths=(1, 2, 4, 8), batches=(1, 2, 4, 8))  # ridge 10 tokens
    assert cpu.time(8, batch=1) == cpu.time(1, batch=1) == 0.015  # 8 tokens fit under one weight read
    assert cpu.time(8, batch=8) == pytest.approx(2 * cpu.time(4, batch=8))  # 8 rows past the ridge: time grows with q
    assert cpu.relative(2, batch=4) == 1.0 and cpu.relative(4, batch=4) == pytest.approx(1.6)  # 16 tokens: past the ridge
    gpu = CostSurface.roofline(0.01, 0.00002, widths=(1, 2, 4, 8), batches=(1, 2, 4, 8))
    assert all(gpu.relative(q, batch=b) == 1.0 for q in (1, 2, 4, 8) for b in (1, 2, 4, 8))


def test_between_batch_sizes_it_interpolates_and_past_the_last_it_extends():
    surface = CostSurface((1, 2, 4), tuple(CostModel.from_times({1: t, 4: 2 * t}) for t in (1.0, 2.0, 4.0)))
    assert surface.at(2) is surface.models[1]
    assert surface.time(1, batch=3) == pytest.approx(3.0) and surface.time(4, batch=3) == pytest.approx(6.0)
    assert surface.time(1, batch=8) == pytest.approx(8.0)  # the line through B = 2 and 4, continued
    flat = CostSurface((1, 2), (CostModel.from_times({1: 1.0}), CostModel.from_times({1: 0.5})))
    assert flat.time(1, batch=6) == 0.5  # never below the largest measured (noise can make it cheaper)
    assert CostSurface.of(CostModel.from_times({1: 1.0, 2: 1.5})).time(2, batch=16) == 1.5


@pytest.mark.parametrize("batches, models, message", [
    ((2, 4), 2, "batches must start at 1"),
    ((1, 1), 2, "strictly increasing"),
    ((1, 2), 1, "one CostModel per batch size"),
])
def test_bad_surfaces_are_refused(batches, models, message):
    curve = CostModel.from_times({1: 1.0, 2: 1.0})
    with pytest.raises(ValueError, match=message):
        CostSurface(batches, (curve,) * models)


def test_curves_of_other_widths_do_not_make_a_surface():
    with pytest.raises(ValueError, match="same widths and KV lengths"):
        CostSurface((1, 2), (CostModel.from_times({1: 1.0, 2: 1.0}), CostModel.from_times({1: 1.0, 4: 1.0})))
    with pytest.raises(ValueError, match="batch must be >= 1"):
        CostSurface.roofline(0.01, 0.001).at(0)


def test_a_surface_round_trips_through_json(tmp_path):
    surface = CostSurface.roofline(0.015, 0.0014, widths=(1, 2, 3), batches=(1, 4))
    assert CostSurface.load(surface.save(tmp_path / "s.json", meta={"machine": "test"})) == surface
    with pytest.raises(ValueError, match="not a ladref.cost-surface/1"):
        CostSurface.from_dict(surface.models[0].to_dict())


def test_measuring_times_the_batched_pass_of_every_batch_size():
    model = tiny_model("llama", 16, 0)
    shapes = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        surface = CostSurface.measure(model, batches=(1, 3), widths=(1, 2), kv_lengths=(4, 8), repeats=2)
    finally:
        handle.remove()
    assert surface.batches == (1, 3) and surface.widths == (1, 2) and surface.kv_lengths == (4, 8)
    assert all(t > 0 for m in surface.models for row in m.seconds for t in row)
    assert {(3, 2), (3, 1), (1, 2)} <= set(shapes) and (3, 10) in shapes  # the prefill: 8 + 2 repeats, 3 rows
    with pytest.raises(ValueError, match="exceeds the model's"):
        batch_curve(model, 2, widths=(1, 2), kv_lengths=(10_000,))


def test_a_cached_surface_is_measured_once(monkeypatch):
    model, cache, calls = tiny_model("llama", 16, 0), CostCache(), []
    real = timing.measure_batch_steps

    def counted(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr("ladref.pricing.surface.measure_batch_steps", counted)
    first = cached_surface(cache, model, (1, 2), widths=(1, 2), kv_lengths=(4,), repeats=1)
    again = cached_surface(cache, model, (1, 2, 4), widths=(1, 2), kv_lengths=(4,), repeats=1)
    assert calls == [1, 2, 4] and again.models[:2] == first.models
    assert batches_up_to(1) == (1,) and batches_up_to(5) == (1, 2, 4, 8) and batches_up_to(40) == (1, 2, 4, 8, 16, 40)


def test_a_batch_of_adaptive_rows_measures_its_surface_through_the_cache():
    model, cache = tiny_model("llama", 16, 0), CostCache()
    decoder = AdaptiveDecoder(model, cache=cache, window=None)
    before = len(cache)
    batch = [[1, 2, 3], [4, 5], [6]]
    result = decoder(batch, 6, eos_token_id=[])
    assert len(cache) == before + 3  # batches 1, 2 and 4: up to the first size >= 3
    assert result.token_ids == [greedy_decode(model, p, 6, eos_token_id=[]).token_ids for p in batch]
    decoder(batch[:2], 6, eos_token_id=[])
    assert len(cache) == before + 3  # measured once
