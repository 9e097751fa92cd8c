"""The FLOPs formula of ladref.bench.flops against torch's FlopCounterMode on tiny eager models."""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model
from torch.utils.flop_counter import FlopCounterMode

from ladref import LookaheadConfig, greedy_decode, jacobi_decode, lookahead_decode
from ladref.bench.flops import (
    ModelShape,
    decode_flops,
    flops_ratio,
    forward_flops,
    lookahead_step_shape,
    measure_forward_flops,
    step_flops,
)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("q,c,k", [(1, 0, 1), (5, 7, None), (12, 3, 4), (24, 30, 13)])
def test_forward_formula_matches_flop_counter(arch, q, c, k):
    model = tiny_model(arch, 16, 0, "eager")
    assert forward_flops(ModelShape.from_model(model), q, c, k) == measure_forward_flops(model, q, c, k)


def test_model_shape_reads_config():
    shape = ModelShape.from_model(tiny_model("llama", 16, 0))
    assert (shape.layers, shape.hidden_size, shape.attention_width, shape.vocab_size) == (2, 32, 32, 16)
    # per layer: q, o (32x32 each), k, v (32x16 each, 2 KV heads), gate, up, down (32x64 each)
    assert shape.layer_params == 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64)


def _measured_total(decoder, *args, **kwargs):
    with FlopCounterMode(display=False) as counter:
        result = decoder(*args, **kwargs)
    return result, counter.get_total_flops()


@pytest.mark.parametrize("config", [LookaheadConfig(4, 4, 4), LookaheadConfig(2, 2, 3)])
def test_decode_flops_replays_a_lookahead_call_exactly(config):
    model = tiny_model("llama", 8, 1, "eager")
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    result, measured = _measured_total(lookahead_decode, model, prompt, 12, config=config)
    report = decode_flops(ModelShape.from_model(model), result.stats, "lookahead", config)
    assert len(report.per_step) == result.stats.steps
    assert report.total == measured


@pytest.mark.parametrize("method", ["greedy", "jacobi"])
def test_decode_flops_replays_greedy_and_jacobi_exactly(method):
    model = tiny_model("qwen2", 16, 2, "eager")
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    if method == "greedy":
        result, measured = _measured_total(greedy_decode, model, prompt, 8)
    else:
        result, measured = _measured_total(jacobi_decode, model, prompt, 8, block_size=3)
    assert decode_flops(ModelShape.from_model(model), result.stats, method).total == measured


def test_step_costs_grow_with_context_and_window():
    shape = ModelShape.from_model(tiny_model("llama", 16, 0))
    assert step_flops(shape, "greedy", 100) > step_flops(shape, "greedy", 10)
    small, big = LookaheadConfig(2, 3, 2), LookaheadConfig(8, 3, 8)
    assert step_flops(shape, "lookahead", 10, small) < step_flops(shape, "lookahead", 10, big)
    assert step_flops(shape, "jacobi", 10, block_size=4) == forward_flops(shape, 5, 10, 5)
    assert lookahead_step_shape(big)[0] == big.max_step_tokens()
    ratio = flops_ratio(shape, small, 2.0, 10)
    assert ratio == step_flops(shape, "lookahead", 10, small) / (2 * step_flops(shape, "greedy", 10))
    assert flops_ratio(shape, small, 1.0, 10) == 2 * ratio
    with pytest.raises(ValueError):
        flops_ratio(shape, small, 0.5, 10)


def test_bad_inputs_are_rejected():
    shape = ModelShape.from_model(tiny_model("llama", 16, 0))
    with pytest.raises(ValueError):
        forward_flops(shape, 0, 3)
    with pytest.raises(ValueError):
        forward_flops(shape, 2, -1)
    with pytest.raises(ValueError):
        ModelShape(0, 1, 1, 1, 1)
    with pytest.raises(ValueError):
        step_flops(shape, "beam", 3)
    with pytest.raises(ValueError):
        decode_flops(shape, greedy_decode(tiny_model("llama", 16, 0), [1, 2], 2).stats, "lookahead")
    with pytest.raises(TypeError):
        ModelShape.from_model(torch.nn.Linear(2, 2))
