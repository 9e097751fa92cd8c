"""The keywords every decoder shares are said once (`ladref.options`), and the model's facts are read once (`ModelFacts`)."""

import inspect

import pytest
import torch
from strategies import tiny_model

import ladref
from ladref import (AdaptiveDecoder, CompiledDecoder, LookaheadConfig, adaptive_decode, draft_decode, greedy_decode,
                    jacobi_decode, lookahead_decode, prompt_lookup_decode, recycling_decode, sample_decode, suffix_decode)
from ladref.bench.hf import generate_decode, hf_prompt_lookup_decode
from ladref.facts import ModelFacts
from ladref.pricing.cost import CostModel
from ladref.fast.static import StaticRunner
from ladref.options import BaselineOptions, CallOptions, DecodeOptions, GreedyOptions, OutputOptions
from ladref.runner import ModelRunner, Runner
from ladref.sources.jacobi import JacobiProposer

SHARED = {"eos_token_id", "tokenizer", "streamer", "do_sample", "temperature", "top_k", "top_p", "generator",
          "logits_processor", "attention_backend", "kernels", "attention_mask"}
DECODERS = {  # name -> (call with one extra keyword, the options it takes)
    "greedy_decode": (lambda m, **kw: greedy_decode(m, [1, 2], 2, **kw), GreedyOptions),
    "sample_decode": (lambda m, **kw: sample_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "jacobi_decode": (lambda m, **kw: jacobi_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "lookahead_decode": (lambda m, **kw: lookahead_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "prompt_lookup_decode": (lambda m, **kw: prompt_lookup_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "recycling_decode": (lambda m, **kw: recycling_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "suffix_decode": (lambda m, **kw: suffix_decode(m, [1, 2], 2, **kw), DecodeOptions),
    "draft_decode": (lambda m, **kw: draft_decode(m, [1, 2], 2, proposers=[JacobiProposer(2)], **kw), DecodeOptions),
    "adaptive_decode": (lambda m, **kw: adaptive_decode(m, [1, 2], 2, cost=CostModel.flat(8), **kw), DecodeOptions),
    "generate_decode": (lambda m, **kw: generate_decode(m, [1, 2], 2, **kw), BaselineOptions),
    "hf_prompt_lookup_decode": (lambda m, **kw: hf_prompt_lookup_decode(m, [1, 2], 2, **kw), BaselineOptions),
}


def test_the_shared_keywords_are_one_list():
    keys = DecodeOptions.__required_keys__ | DecodeOptions.__optional_keys__
    assert keys == SHARED and not DecodeOptions.__required_keys__
    assert GreedyOptions.__optional_keys__ == SHARED - {"do_sample", "temperature", "top_k", "top_p", "generator"}
    assert CallOptions.__optional_keys__ == SHARED - {"attention_backend", "kernels", "attention_mask", "logits_processor"}  # compiled steps refuse it
    assert BaselineOptions.__optional_keys__ == {"eos_token_id", "tokenizer", "streamer", "attention_backend"}
    assert OutputOptions.__optional_keys__ == {"eos_token_id", "tokenizer", "streamer"}
    assert "DecodeOptions" in ladref.__all__


@pytest.mark.parametrize("name", DECODERS)
def test_every_decoder_takes_the_shared_keywords_whole_and_names_an_unknown_one(name):
    call, allowed = DECODERS[name]
    model = tiny_model("llama", 16, 0)
    with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'eos'$"):
        call(model, eos=3)
    for key in SHARED - allowed.__optional_keys__:  # the sampling keywords greedy decoders refuse
        with pytest.raises(TypeError, match=rf"{name}\(\) got an unexpected keyword argument '{key}'"):
            call(model, **{key: None})
    doc = inspect.getdoc(getattr(ladref, name, None) or globals()[name])
    assert "**options" in doc and "ladref.options" in doc  # documented once, referenced here
    if name != "sample_decode":  # a shared keyword reaches the call: greedy's first token as EOS ends the output there
        first = greedy_decode(model, [1, 2], 2, eos_token_id=[]).token_ids[0]
        assert call(model, eos_token_id=first).token_ids == [first]


def test_sample_decode_always_samples():
    with pytest.raises(ValueError, match="always samples"):
        sample_decode(tiny_model("llama", 16, 0), [1, 2], 2, do_sample=False)


def test_decoder_objects_take_the_call_keywords_and_keep_their_backend():
    model = tiny_model("llama", 16, 0)
    adaptive = AdaptiveDecoder(model, cost=CostModel.flat(8))
    with pytest.raises(TypeError, match=r"AdaptiveDecoder.__call__\(\) got an unexpected keyword argument 'attention_backend'"):
        adaptive([1, 2], 2, attention_backend="math")
    generator = torch.Generator().manual_seed(0)
    assert len(adaptive([1, 2], 3, do_sample=True, generator=generator, eos_token_id=[]).token_ids) == 3
    compiled = CompiledDecoder(model, max_length=32, mode=None)
    with pytest.raises(TypeError, match=r"CompiledDecoder.__call__\(\) got an unexpected keyword argument 'do_sample'"):
        compiled([1, 2], 2, do_sample=True)


def test_the_model_facts_are_read_once_from_the_text_config():
    model = tiny_model("llama", 16, 0)
    facts = ModelFacts.of(model)
    config = model.config.get_text_config()
    assert (facts.vocab_size, facts.dtype, facts.context) == (16, next(model.parameters()).dtype, config.max_position_embeddings)
    assert facts.device == torch.device("cpu") and facts.attention == "sdpa"
    with pytest.raises(ValueError, match="has no parameters"):
        ModelFacts.of(type("Empty", (torch.nn.Module,), {"config": model.config})())
    with pytest.raises(ValueError, match=f"context of {facts.context} positions"):  # the budget is checked against them
        greedy_decode(model, [1, 2], facts.context)


def test_the_runners_share_one_base():
    model = tiny_model("llama", 16, 0)
    eager, static = ModelRunner(model), StaticRunner(model, 16)
    for runner in (eager, static):
        assert isinstance(runner, Runner) and runner.facts == ModelFacts.of(model)
        runner.prefill(torch.tensor([1, 2, 3]), ladref.DecodeStats())
        assert runner.past_len == 2
        runner.empty()
        assert runner.past_len == 0
    assert eager.details() == ["sdpa=" + ("+".join(k.name.lower() for k in eager.kernels) if eager.kernels else "default"), "kv_heads=shared", "head=W@h^T",
                               "linears=W@x^T(2-8)"]
    assert static.details()[1:] == ["kv_heads=shared", "span=used", "compile_mode=None", "max_length=16"] and (eager.max_length, eager.widths) == (None, None)


def test_one_reach_formula():
    from ladref.proposer import step_needs
    from ladref.sources.lookahead import LookaheadProposer

    config = LookaheadConfig(window_size=3, ngram_size=4, max_candidates=2)
    proposer = LookaheadProposer(config)
    proposer.begin([1, 2, 3])
    assert step_needs([proposer]).reach == config.step_extent() == 3 + 4
    assert step_needs([proposer], 20).reach == 20 and step_needs([JacobiProposer(5)], 5).reach == 5
