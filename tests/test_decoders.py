"""End-to-end: greedy and Jacobi decoding against transformers' generate(do_sample=False).

Shape of every test (as minGPT's import test): logits allclose first, then tokens equal.
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    architectures,
    build_tiny,
    hf_greedy,
    prompts,
    seeds,
    tiny_model,
    vocab_sizes,
)

from ladref import LookaheadConfig, greedy_decode, jacobi_decode, lookahead_decode
from ladref.call import TokenSink
from ladref.sources.jacobi import converged_prefix, next_guess
from ladref.runner import ModelRunner


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_runner_logits_equal_plain_forward(arch):
    model, ids = tiny_model(arch, 32, 0), torch.tensor([1, 5, 9, 2, 2, 7])
    runner = ModelRunner(model)
    first = runner.forward(ids[:4])
    second = runner.forward(ids[4:])  # continues from the cache
    torch.testing.assert_close(torch.cat([first, second]), model(ids[None]).logits[0], rtol=1e-9, atol=1e-9)


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 9), st.integers(1, 40))
def test_greedy_and_jacobi_equal_generate(arch, vocab, seed, data, block_size, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    expected = hf_greedy(model, prompt, max_new_tokens, eos)
    eos_arg = [] if eos is None else eos
    assert greedy_decode(model, prompt, max_new_tokens, eos_token_id=eos_arg).token_ids == expected
    jacobi = jacobi_decode(model, prompt, max_new_tokens, block_size=block_size, eos_token_id=eos_arg)
    assert jacobi.token_ids == expected
    assert jacobi.stats.steps <= len(expected) and all(a >= 1 for a in jacobi.stats.accepted_per_step)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_decode_computes_exactly_as_generate_in_bfloat16(arch):
    """The oracle splits the computation as generate() does (whole prompt, then one token per pass
    under the model's own causal mask), so in bfloat16 every pass's logits are bitwise generate()'s.
    (The former split, L-1 prompt tokens then the last one under an explicit mask, rounds
    differently at this width: SmolLM2 in bfloat16 then parted from generate() at near-ties.)"""
    model = build_tiny(arch, 256, 0, width=64).to(torch.bfloat16)
    prompt = torch.randint(0, 256, (64,), generator=torch.Generator().manual_seed(1))
    out = model.generate(prompt[None], attention_mask=torch.ones_like(prompt[None]), max_new_tokens=10, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    expected = torch.stack([step[0] for step in out.logits])  # (10, V)
    seen = []
    handle = model.register_forward_hook(lambda module, args, output: seen.append(output.logits[0, -1]))
    try:
        result = greedy_decode(model, prompt, 10, eos_token_id=[])
    finally:
        handle.remove()
    assert torch.equal(torch.stack(seen), expected)  # allclose is not the point: the same bits
    assert result.token_ids == out.sequences[0, 64:].tolist()


@pytest.mark.parametrize("decode", ["greedy", "jacobi", "lookahead"])
def test_steps_count_real_forward_passes(decode):
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]
    calls = []
    handle = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        if decode == "greedy":
            result = greedy_decode(model, prompt, 30, eos_token_id=[])
        elif decode == "jacobi":
            result = jacobi_decode(model, prompt, 30, block_size=4, eos_token_id=[])
        else:
            result = lookahead_decode(model, prompt, 30, config=LookaheadConfig(3, 3, 3), eos_token_id=[])
    finally:
        handle.remove()
    # greedy, as generate(): the whole prompt in one pass, which yields token 1; a drafting decoder's
    # first step carries the prompt's first L-1 tokens in its pass (`prefill(defer=True)`)
    assert result.stats.steps == len(calls)
    assert result.stats.prefill_tokens == len(prompt) - 1


def test_jacobi_converges_to_the_fixed_point():
    guess = torch.tensor([4, 5, 6, 7])
    preds = torch.tensor([4, 5, 9, 1, 2])  # o_0 .. o_4 after [current, g_1 .. g_4]
    assert converged_prefix(guess, preds) == 2  # g_1 == o_0, g_2 == o_1, g_3 != o_2
    assert next_guess(preds, 2, 4).tolist() == [1, 2, 2, 2]
    with pytest.raises(ValueError, match="block_size"):
        jacobi_decode(tiny_model(), [1], 4, block_size=0)


def test_sink_stops_inside_a_step():
    sink = TokenSink(max_new_tokens=10, eos=frozenset({7}))
    assert sink.extend([1, 7, 3]) == 2 and sink.done and sink.tokens == [1, 7]
    sink = TokenSink(max_new_tokens=3, eos=frozenset())
    assert sink.extend([1, 2]) == 2 and not sink.done
    assert sink.extend([3, 4, 5]) == 1 and sink.done and sink.tokens == [1, 2, 3]


@pytest.mark.parametrize("stop_at", [0, 1, 2, 3])
def test_eos_and_budget_inside_an_accepted_ngram(stop_at):
    model = tiny_model("llama", 16, 0)  # its greedy text cycles: ... 12 4 14 13 0 15 12 4 ...
    prompt = [1, 2, 3] + hf_greedy(model, [1, 2, 3], 10)  # the prompt seeds the pool with the cycle
    config = LookaheadConfig(4, 5, 4)
    full = lookahead_decode(model, prompt, 12, config=config, eos_token_id=[])
    assert full.stats.accepted_per_step[0] == 5  # the first step accepts a whole n-gram (N = 5)
    eos = full.token_ids[stop_at]
    by_eos = lookahead_decode(model, prompt, 12, config=config, eos_token_id=eos)
    assert by_eos.token_ids == hf_greedy(model, prompt, 12, eos) == full.token_ids[: stop_at + 1]
    by_budget = lookahead_decode(model, prompt, stop_at + 1, config=config, eos_token_id=[])
    assert by_budget.token_ids == full.token_ids[: stop_at + 1]
    assert by_eos.stats.accepted_per_step == by_budget.stats.accepted_per_step == [stop_at + 1]
