"""The model-family matrix of docs/models.md: which families run (and match greedy), which are refused."""

from __future__ import annotations

import pytest
import torch
from families import REFUSED, SUPPORTED, build_family, family_model
from strategies import hf_greedy

from ladref import LookaheadConfig, greedy_decode, lookahead_decode

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
