"""``kernels="transformers"`` (`ladref.facts.forward_choice`): the model's forward exactly as transformers
runs it, none of ladref's CPU choices (W @ x^T linears, its own head, shared key/value heads), in both tiers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from strategies import hf_greedy, tiny_model
from torch.overrides import _get_current_function_mode_stack

from ladref import AdaptiveDecoder, CapturedBatchDecoder, adaptive_decode, greedy_decode, lookahead_decode
from ladref.facts import check_model, forward_choice
from ladref.kernels import SmallRowLinears
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 6, 7], [3, 3, 2]]


def watched(model: torch.nn.Module) -> tuple[dict, list, list]:
    """Counts of the output head's own forward calls, and whether each MLP pass ran in `SmallRowLinears`."""
    seen, scoped = {"head": 0}, []
    hooks = [model.get_output_embeddings().register_forward_hook(lambda *_: seen.__setitem__("head", seen["head"] + 1)),
             model.model.layers[0].mlp.register_forward_pre_hook(
                 lambda *_: scoped.append(any(isinstance(m, SmallRowLinears) for m in _get_current_function_mode_stack())))]
    return seen, scoped, hooks


def test_forward_choice_keeps_or_drops_the_cpu_choices():
    model = tiny_model("llama", 32, 0)
    facts, backend = forward_choice(model, {})
    assert (facts, backend) == (check_model(model), "auto") and facts.own_head and facts.small_linears and facts.shared_kv
    plain, backend = forward_choice(model, {"kernels": "transformers"})
    assert backend == "torch" and plain == dataclasses.replace(facts, own_head=False, small_linears=False, shared_kv=False)
    assert forward_choice(model, {"kernels": "transformers", "attention_backend": "torch"})[1] == "torch"


@pytest.mark.parametrize("options, error, words", [
    ({"kernels": 1}, TypeError, "kernels must be a str"),
    ({"kernels": "exact"}, ValueError, "unknown kernels 'exact'"),
    ({"kernels": "transformers", "attention_backend": "math"}, ValueError, "pass one or the other"),
])
def test_a_bad_choice_is_refused_before_any_pass(options, error, words):
    model = tiny_model("llama", 32, 0)
    with pytest.raises(error, match=words):
        greedy_decode(model, PROMPTS[0], 4, **options)
    with pytest.raises(error, match=words):
        greedy_decode(model, PROMPTS, 4, **options)
    if "attention_backend" not in options:
        with pytest.raises(error, match=words):
            AdaptiveDecoder(model, cost=CostSurface.roofline(0.01, 0.00002), **options)


@pytest.mark.parametrize("batch", [False, True])
def test_transformers_kernels_run_the_model_as_transformers_does(batch):
    """Every pass calls the model's own head and no linear layer runs in ladref's scope; the tokens are
    generate()'s. The default runs ladref's choices on this float64 CPU model (the hooks see them)."""
    model = tiny_model("llama", 32, 1)
    prompts = PROMPTS if batch else PROMPTS[0]
    for kernels in ("transformers", "auto"):
        seen, scoped, hooks = watched(model)
        try:
            result = greedy_decode(model, prompts, 12, eos_token_id=[], kernels=kernels)
        finally:
            for hook in hooks:
                hook.remove()
        if kernels == "transformers":  # the head once a pass at least (a prompt's prefill may skip its logits)
            assert scoped and not any(scoped) and seen["head"] >= (result if batch else result.stats).steps
        else:
            assert any(scoped)
    for prompt, row in zip(PROMPTS, lookahead_decode(model, PROMPTS, 12, eos_token_id=[], kernels="transformers")):
        assert row.token_ids == hf_greedy(model, prompt, 12)


def test_adaptive_passes_the_choice_to_every_call():
    model = tiny_model("llama", 32, 1)
    seen, scoped, hooks = watched(model)
    try:
        result = adaptive_decode(model, PROMPTS[0], 12, cost=CostSurface.roofline(0.01, 0.00002), eos_token_id=[],
                                 kernels="transformers")
    finally:
        for hook in hooks:
            hook.remove()
    assert scoped and not any(scoped) and result.token_ids == hf_greedy(model, PROMPTS[0], 12)


def test_a_captured_step_compiles_its_own_forward_and_takes_no_choice():
    decoder = CapturedBatchDecoder(tiny_model("llama", 32, 0), max_length=64, mode=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'kernels'"):
        decoder([[1, 2, 3]], 4, kernels="transformers")
