"""Task 1.4: the combined lookahead step (one forward, window + pool update, verify, KV commit)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    architectures,
    hf_greedy,
    lookahead_configs,
    prompts,
    seeds,
    tiny_model,
    vocab_sizes,
)

from ladref import LookaheadConfig, greedy_decode, lookahead_decode
from ladref.lookahead import LookaheadState, lookahead_step
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

pytestmark = pytest.mark.task1_4


def started(model, prompt, config):
    runner, state = ModelRunner(model), LookaheadState.start(torch.tensor(prompt), config)
    current = runner.prefill(torch.tensor(prompt), DecodeStats())
    return runner, state, current


def test_step_accepts_a_full_ngram_and_commits_its_cache():
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]
    greedy = hf_greedy(model, prompt, 6)
    config = LookaheadConfig(window_size=3, ngram_size=4, max_candidates=3, pool_from_prompt=False)
    runner, state, current = started(model, prompt, config)
    state.pool.add([current, 0, 0, 0])  # a wrong candidate ...
    state.pool.add([current, *greedy[:3]])  # ... and greedy's own next 3 tokens
    accepted, width = lookahead_step(runner, state, current, config)
    # 1. all N tokens accepted: the 3 verified ones plus the model's own next token
    assert accepted == greedy[:4]
    assert width == (4 - 1) * (3 + 2)
    # 2. the cache equals that of a plain causal forward over the accepted sequence
    reference = ModelRunner(model)
    reference.forward(torch.tensor(prompt + greedy[:3]))
    assert runner.past_len == reference.past_len == len(prompt) + 3
    for ours, theirs in zip(runner.cache.layers, reference.cache.layers):
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-9, atol=1e-9)
    # 3. so the next step's logits are greedy's
    logits = runner.forward(torch.tensor([accepted[-1]]))
    expected = model(torch.tensor([prompt + greedy[:4]])).logits[0, -1]
    torch.testing.assert_close(logits[0], expected, rtol=1e-9, atol=1e-9)


def test_step_without_candidates_is_one_greedy_token_and_slides_the_window():
    model, prompt = tiny_model("qwen2", 16, 1), [4, 4, 2]
    config = LookaheadConfig(window_size=4, ngram_size=3, max_candidates=2, pool_from_prompt=False)
    runner, state, current = started(model, prompt, config)
    old = state.window.clone()
    accepted, width = lookahead_step(runner, state, current, config)
    assert accepted == hf_greedy(model, prompt, 1) and width == (3 - 1) * 4
    assert state.window.shape == (2, 4) and state.steps == 1
    assert torch.equal(state.window[0, 1:], old[1, 1:])  # the old newest row moved up
    assert runner.past_len == len(prompt)  # only the current token was committed


def test_window_predictions_are_jacobi_updates_and_feed_the_pool():
    model, prompt = tiny_model("llama", 16, 2), [5, 6, 7, 8]
    config = LookaheadConfig(window_size=3, ngram_size=2, max_candidates=0, pool_from_prompt=False)
    runner, state, current = started(model, prompt, config)
    window = state.window.clone()
    window[0, 0] = current
    lookahead_step(runner, state, current, config)
    # with N = 2 the window is one row and the new row is one Jacobi iteration of it
    expected = model(torch.tensor([prompt + window[0, 1:].tolist()])).logits[0, len(prompt) - 1 :].argmax(-1)
    assert state.window[0].tolist() == expected.tolist()
    assert len(state.pool) == len(set(zip(window[0].tolist(), expected.tolist())))


def test_verification_speeds_up_repetitive_text():
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]  # its greedy text cycles with period 5
    result = lookahead_decode(model, prompt, 60, config=LookaheadConfig(4, 4, 4), eos_token_id=[])
    assert result.token_ids == hf_greedy(model, prompt, 60)
    assert result.stats.compression > 2.0  # S: tokens per step


@given(architectures, vocab_sizes, seeds, st.data(), lookahead_configs(), st.integers(1, 40))
def test_lookahead_output_is_greedy(arch, vocab, seed, data, config, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    expected = hf_greedy(model, prompt, max_new_tokens, eos)
    ours = greedy_decode(model, prompt, max_new_tokens, eos_token_id=[] if eos is None else eos)
    assert ours.token_ids == expected
    result = lookahead_decode(model, prompt, max_new_tokens, config=config, eos_token_id=[] if eos is None else eos)
    assert result.token_ids == expected
    stats = result.stats
    assert stats.new_tokens == len(expected) and stats.steps <= len(expected)
    assert all(1 <= a <= config.ngram_size for a in stats.accepted_per_step)
    assert max(stats.forward_tokens_per_step) <= config.max_step_tokens()
