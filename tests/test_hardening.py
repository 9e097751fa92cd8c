"""Bad input gets one clear error, before any forward pass; calls share no state."""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model

from ladref import (
    LookaheadConfig,
    greedy_decode,
    jacobi_decode,
    lookahead_decode,
    sample_decode,
)
from ladref.bench.hf import hf_prompt_lookup_decode

DECODERS = {
    "greedy": greedy_decode,
    "jacobi": jacobi_decode,
    "lookahead": lookahead_decode,
    "hf_plookup": hf_prompt_lookup_decode,
    "sample": lambda model, ids, **kw: sample_decode(model, ids, generator=torch.Generator().manual_seed(0), **kw),
}
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def model():
    return tiny_model("llama", 16, 0)  # context of 512 positions, no EOS


@pytest.fixture
def no_forward(model):
    """Fails the test if the model runs a forward pass."""

    def hook(module, args):
        raise AssertionError("a forward pass ran before the input was rejected")

    handle = model.register_forward_pre_hook(hook)
    yield
    handle.remove()


class NoEosTokenizer:
    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


BAD_INPUTS = [
    ([], {}, ValueError, "the prompt is empty"),
    (torch.zeros(1, 0, dtype=torch.long), {}, ValueError, "the prompt is empty"),
    (torch.ones(1, 1, 3, dtype=torch.long), {}, ValueError, "input_ids must have shape \\(L,\\) or \\(1, L\\)"),
    ([1] * 600, {}, ValueError, "the prompt \\(600 tokens\\) leaves no room in the model's context of 512"),
    (PROMPT, {"max_new_tokens": 0}, ValueError, "max_new_tokens must be >= 1, got 0"),
    (PROMPT, {"max_new_tokens": -3}, ValueError, "max_new_tokens must be >= 1, got -3"),
    (PROMPT, {"max_new_tokens": 2.5}, TypeError, "max_new_tokens must be an int"),
    (PROMPT, {"max_new_tokens": 510}, ValueError, "exceeds the model's context of 512 positions"),
    (torch.tensor([PROMPT], dtype=torch.float32), {}, TypeError, "input_ids must hold integer token ids"),
    (torch.tensor(PROMPT, device="meta"), {}, ValueError, "input_ids are on meta but the model is on cpu"),
    ([1, 2, 99], {}, ValueError, "outside the model's vocabulary \\[0, 16\\)"),
    ([1, 2, -1], {}, ValueError, "outside the model's vocabulary"),
    ("hello", {}, TypeError, "input_ids must be a list of ints or a LongTensor"),
    (PROMPT, {"tokenizer": NoEosTokenizer()}, ValueError, "the tokenizer \\(NoEosTokenizer\\) has no EOS token"),
    (PROMPT, {"eos_token_id": 16}, ValueError, "eos_token_id 16 is outside the model's vocabulary"),
    (PROMPT, {"eos_token_id": "</s>"}, TypeError, "eos_token_id must be an int or a list of ints"),
    (PROMPT, {"streamer": print}, TypeError, "streamer must have put\\(\\) and end\\(\\) methods"),
    (PROMPT, {"attention_backend": "fast"}, ValueError, "unknown attention_backend 'fast'; choose one of"),
    (PROMPT, {"attention_backend": None}, TypeError, "attention_backend must be a str"),
    (PROMPT, {"attention_backend": "efficient"}, ValueError, "SDPA efficient attention has no kernel on cpu"),
]


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("ids, kwargs, error, message", BAD_INPUTS, ids=[m[:30] for *_, m in BAD_INPUTS])
def test_bad_input_is_refused_before_any_forward(model, no_forward, name, ids, kwargs, error, message):
    kwargs = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=message):
        DECODERS[name](model, ids, **kwargs)


def test_a_decoder_of_one_prompt_refuses_a_batch(model, no_forward):
    """The transformers baselines take one prompt per call (the library's decoders take batches: test_batch.py)."""
    with pytest.raises(ValueError, match="batch size 2 > 1 is not supported"):
        hf_prompt_lookup_decode(model, torch.tensor([PROMPT, PROMPT]), max_new_tokens=4)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"window_size": 0}, ValueError, "window_size \\(W\\) must be >= 1, got 0"),
        ({"ngram_size": 1}, ValueError, "ngram_size \\(N\\) must be >= 2, got 1"),
        ({"max_candidates": -1}, ValueError, "max_candidates \\(G\\) must be >= 0, got -1"),
        ({"window_size": 2.0}, TypeError, "window_size \\(W\\) must be an int"),
        ({"ngram_size": True}, TypeError, "ngram_size \\(N\\) must be an int"),
    ],
)
def test_invalid_w_n_g(kwargs, error, message):
    with pytest.raises(error, match=message):
        LookaheadConfig(**kwargs)


def test_lookahead_specific_arguments(model, no_forward):
    with pytest.raises(TypeError, match="config must be a LookaheadConfig"):
        lookahead_decode(model, PROMPT, config={"window_size": 4})
    with pytest.raises(ValueError, match="exceeds the model's context"):  # the window's positions count too
        lookahead_decode(model, PROMPT, 500, config=LookaheadConfig(window_size=8, ngram_size=4))
    with pytest.raises(TypeError, match="model must be a transformers causal LM"):
        lookahead_decode("gpt2", PROMPT)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        lookahead_decode(model, PROMPT, do_sample=True, generator=123)


def test_old_positional_call_names_the_new_form(model, no_forward):
    config = LookaheadConfig(window_size=4, ngram_size=3, max_candidates=4)
    new_form = "call lookahead_decode\\(model, input_ids, max_new_tokens, config=config\\)"
    with pytest.raises(TypeError, match=new_form):
        lookahead_decode(model, PROMPT, config, 32)
    with pytest.raises(TypeError, match=new_form):
        lookahead_decode(model, PROMPT, config)
    with pytest.raises(TypeError, match=new_form):
        lookahead_decode(model, PROMPT, 32, config, 7)


def test_no_eos_opt_out_and_tokenizer_fallback(model):
    out = lookahead_decode(model, PROMPT, max_new_tokens=12, eos_token_id=[], tokenizer=NoEosTokenizer())
    assert len(out.token_ids) == 12 and out.text == " ".join(map(str, out.token_ids))
    stop = out.token_ids[5]

    class EosTokenizer(NoEosTokenizer):
        eos_token_id = stop

    short = lookahead_decode(model, PROMPT, max_new_tokens=12, tokenizer=EosTokenizer())
    assert short.token_ids == out.token_ids[: out.token_ids.index(stop) + 1]


def test_repeated_and_interleaved_calls_return_the_same_result(model):
    config = LookaheadConfig(window_size=4, ngram_size=3, max_candidates=4)
    first = lookahead_decode(model, PROMPT, 32, config=config)
    lookahead_decode(model, [5, 6, 7, 5, 6, 7, 5], 32, config=config)  # another prompt in between
    again = lookahead_decode(model, PROMPT, 32, config=config)
    assert again.token_ids == first.token_ids
    assert again.stats.accepted_per_step == first.stats.accepted_per_step  # same pool growth: nothing carried over
    sampled = [lookahead_decode(model, PROMPT, 16, config=config, do_sample=True, generator=torch.Generator().manual_seed(3)).token_ids
               for _ in range(2)]
    assert sampled[0] == sampled[1]
