"""The constant-shape, static-cache decoder (ladref.compiled) against greedy decoding and generate.

Eager constant-shape steps (``mode=None``) carry the property tests (float64, exact); one slow
test compiles the step with torch.compile on the CPU (float32); CUDA graphs run only on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    architectures,
    build_tiny,
    hf_greedy,
    lookahead_configs,
    prompts,
    seeds,
    tiny_model,
    vocab_sizes,
)

from ladref import CompiledDecoder, LookaheadConfig, greedy_decode, lookahead_decode
from ladref.lookahead import LookaheadProposer
from ladref.proposer import merged_tree
from ladref.results import DecodeStats
from ladref.step import draft_step
from ladref.runner import ModelRunner, StaticRunner

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


@given(architectures, vocab_sizes, seeds, lookahead_configs(), st.data(), st.integers(1, 30))
def test_constant_shape_decoding_equals_generate(arch, vocab, seed, config, data, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    first, second = data.draw(prompts(vocab)), data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    eos_arg = [] if eos is None else eos
    for decoder in (CompiledDecoder(model, config, max_length=96, mode=None), CompiledDecoder(model, max_length=96, mode=None)):
        for prompt in (first, second):  # one decoder, several calls: nothing carries over
            result = decoder(prompt, max_new_tokens, eos_token_id=eos_arg)
            assert result.token_ids == hf_greedy(model, prompt, max_new_tokens, eos)
            assert max(result.stats.forward_tokens_per_step) <= decoder.step_tokens  # padded to one shape


@pytest.mark.parametrize("config", [LookaheadConfig(4, 4, 4), LookaheadConfig(3, 5, 2), LookaheadConfig(2, 3, 0)])
def test_padded_step_matches_the_unpadded_step(config):
    model, prompt = tiny_model("llama", 16, 0), torch.tensor(PROMPT * 2)
    dynamic = ModelRunner(model)
    static = StaticRunner(model, 96, commit_slots=config.ngram_size, step_width=config.max_step_tokens())
    proposers = [LookaheadProposer(config), LookaheadProposer(config)]
    for proposer in proposers:
        proposer.begin(prompt.tolist())
    currents = [runner.prefill(prompt, DecodeStats()) for runner in (dynamic, static)]
    context = prompt.tolist()
    for _ in range(6):  # same accepted tokens, same window, same pool, steps after steps
        out = [draft_step(runner, current, merged_tree([p], context, 16), p.window)
               for runner, p, current in zip((dynamic, static), proposers, currents)]
        for p, outcome in zip(proposers, out):
            p.learn(outcome)
        assert out[0].tokens == out[1].tokens
        currents = [outcome.tokens[-1] for outcome in out]
        context += out[0].tokens
        assert torch.equal(proposers[0].window.grid, proposers[1].window.grid)
    length = dynamic.past_len
    assert static.past_len == length
    for dyn, stat in zip(dynamic.cache.layers, static.cache.layers):  # the committed K/V are the same
        torch.testing.assert_close(stat.keys[..., :length, :], dyn.keys, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(stat.values[..., :length, :], dyn.values, rtol=1e-9, atol=1e-9)
        assert int(stat.cumulative_length) == length


def test_bad_arguments_are_refused():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match="mode must be one of"):
        CompiledDecoder(model, max_length=64, mode="max-autotune-plus")
    with pytest.raises(TypeError, match="config must be a LookaheadConfig or None"):
        CompiledDecoder(model, (4, 4, 4), max_length=64)
    with pytest.raises(ValueError, match="max_length must be >= 2"):
        CompiledDecoder(model, max_length=0)
    decoder = CompiledDecoder(model, LookaheadConfig(4, 4, 4), max_length=40, mode=None)
    with pytest.raises(ValueError, match="exceeds this decoder's max_length 40"):
        decoder(PROMPT, 20)
    with pytest.raises(ValueError, match="attention_backend"):
        CompiledDecoder(model, max_length=64, attention_backend="efficient")  # no CPU kernel


def _graph_count() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["stats"].values()) if "stats" in counters else 0


@pytest.mark.slow
def test_torch_compile_on_cpu_is_exact_and_compiles_once():
    torch._dynamo.reset()
    model = build_tiny("llama", 16, 1).float()  # float32: the compiled kernels must reproduce greedy
    expected = [greedy_decode(model, p, 24, eos_token_id=[]).token_ids for p in (PROMPT, [5, 4, 6, 5, 4])]
    config = LookaheadConfig(3, 3, 3)
    for decoder in (CompiledDecoder(model, config, max_length=64, mode="default"), CompiledDecoder(model, max_length=64, mode="default")):
        before = _graph_count()
        assert decoder.warmup() > 0 and decoder.capture_s == decoder.warmup()  # measured once
        compiled = _graph_count()
        assert compiled > before  # warmup compiled the step
        results = [decoder(p, 24, eos_token_id=[]) for p in (PROMPT, [5, 4, 6, 5, 4])]
        assert [r.token_ids for r in results] == expected
        assert _graph_count() == compiled, "a decoding call recompiled the step"
    eager = lookahead_decode(model, PROMPT, 24, config=config, eos_token_id=[])
    assert eager.token_ids == expected[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphs_replay_greedy_decoding():
    model = build_tiny("llama", 16, 1).float().cuda()
    expected = greedy_decode(model, PROMPT, 24, eos_token_id=[]).token_ids
    for config in (None, LookaheadConfig(3, 3, 3)):
        decoder = CompiledDecoder(model, config, max_length=64, mode="reduce-overhead")
        assert decoder(PROMPT, 24, eos_token_id=[]).token_ids == expected
