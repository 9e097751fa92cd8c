"""The model-family matrix of docs/models.md: which families run (and match greedy), which are refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from families import REFUSED, SUPPORTED, build_family, family_model
from strategies import hf_greedy
from transformers import DynamicCache

from ladref import LookaheadConfig, greedy_decode, lookahead_decode
from ladref.facts import PLAIN_HEADS, ModelFacts
from ladref.head import forward_logits
from ladref.hf_internals import cache_arg

PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2]
CONFIG = LookaheadConfig(window_size=3, ngram_size=3, max_candidates=4)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("family", SUPPORTED)
def test_family_lookahead_matches_transformers_greedy(family):
    model = family_model(family, 16, 0)
    result = lookahead_decode(model, PROMPT, 24, config=CONFIG)
    assert result.token_ids == hf_greedy(model, PROMPT, 24)
    sampled = lookahead_decode(model, PROMPT, 8, config=CONFIG, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert len(sampled.token_ids) == 8


class CountForwards:
    """Counts forward passes of a model through a pre-hook."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, module, args) -> None:
        self.calls += 1


@pytest.mark.parametrize(
    "family, message",
    [
        ("mamba", "is not an attention model with a KV cache: its forward\\(\\) lacks position_ids(, past_key_values)?; recurrent"),
        ("gemma2", "has DynamicSlidingWindowLayer cache layers"),
        ("mistral_sliding", "has DynamicSlidingWindowLayer cache layers"),
        ("flash_attention_2", "attention implementation 'flash_attention_2' cannot take ladref's custom 4-D attention mask"),
    ],
)
@pytest.mark.parametrize("decode", [greedy_decode, lookahead_decode], ids=["greedy", "lookahead"])
def test_refused_families_fail_before_any_forward(family, message, decode):
    assert family in REFUSED
    model = build_family(family, 16, 0)
    counter = CountForwards(model)
    try:
        with pytest.raises(ValueError, match=message):
            decode(model, PROMPT, max_new_tokens=4)
    finally:
        counter.handle.remove()
    assert counter.calls == 0


def test_non_float_weights_are_refused():
    model = build_family("llama", 16, 0)
    weight = model.get_input_embeddings().weight
    model.get_input_embeddings().weight = torch.nn.Parameter(weight.detach().to(torch.int8), requires_grad=False)
    with pytest.raises(ValueError, match="has torch.int8 weights"):
        lookahead_decode(model, PROMPT, 4, config=CONFIG)


@pytest.mark.parametrize("family", SUPPORTED)
def test_a_pass_of_several_rows_computes_the_head_and_linears_as_the_model_does(family):
    model = build_family(family, 16, 0)
    facts = ModelFacts.of(model)
    assert facts.own_head and facts.small_linears and family in PLAIN_HEADS  # every family of the matrix, on a CPU

    def logits(facts, batch, q, keep):
        ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]])[:batch, :q]
        inputs = {"input_ids": ids, "position_ids": torch.arange(q).expand(batch, q), "use_cache": True,
                  cache_arg(model): DynamicCache(config=model.config)}
        return forward_logits(model, facts, inputs, keep)

    plain = dataclasses.replace(facts, own_head=False, small_linears=False)  # as generate() computes them
    # passes of 7, 4, 4, 14 and 1 rows: the linears as W @ x^T in those of `SMALL_ROWS` (2-8), the head as W @ h^T from 2 kept rows
    for batch, q, keep in [(1, 7, torch.tensor([0, 3, 6])), (2, 2, None), (1, 4, torch.tensor([3])), (2, 7, torch.tensor([6])),
                           (1, 1, None)]:
        own, theirs = logits(facts, batch, q, keep), logits(plain, batch, q, keep)
        assert own.shape == theirs.shape == (batch, q if keep is None else len(keep), 16)
        torch.testing.assert_close(own, theirs, rtol=0, atol=1e-12)


def test_a_head_with_anything_after_it_stays_the_models():
    assert not ModelFacts.of(build_family("gemma2", 16, 0)).own_head  # soft-capped logits
    assert not ModelFacts.of(build_family("llama", 16, 0).to("meta")).own_head  # not a CPU model
    assert not ModelFacts.of(build_family("llama", 16, 0).to(torch.bfloat16)).own_head  # not measured there
    for model in (build_family("llama", 16, 0).to("meta"), build_family("llama", 16, 0).to(torch.bfloat16)):
        assert not ModelFacts.of(model).small_linears  # the linear layers too: F.linear as the model calls it
