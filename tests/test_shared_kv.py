"""Attention with shared key/value heads (`ladref.hf_internals.shared_kv_attention`, `shared_kv_scope`): the
attention a masked pass computes, without copying the cache once per query head, eager or static; and a static
step that attends over the slots it uses only (`StaticRunner.span`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from families import build_family, family_model
from strategies import build_tiny
from transformers import DynamicCache

from ladref.facts import check_model
from ladref.fast.static import StaticRunner
from ladref.head import batch_forward
from ladref.hf_internals import SHARED_KV, cache_arg, new_cache, shared_kv_attention, shared_kv_scope
from ladref.results import DecodeStats
from ladref.runner import ModelRunner


def reference_attention(query, key, value, mask, scale):
    """softmax(Q K^T scale + mask) V, each key/value head repeated for its group of query heads: (B, q, H, D)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    weights = torch.softmax(query @ key.transpose(-1, -2) * scale + mask, dim=-1)
    return (weights @ value).transpose(1, 2)


@pytest.mark.parametrize("q", [1, 3, 8])
def test_shared_heads_compute_the_attention_of_repeated_heads(q):
    draw = torch.Generator().manual_seed(q)
    model = family_model("llama")
    module = model.model.layers[0].self_attn  # 4 query heads, 2 key/value heads
    query = torch.randn(1, 4, q, 8, generator=draw, dtype=torch.float64)
    key, value = (torch.randn(1, 2, 20, 8, generator=draw, dtype=torch.float64) for _ in range(2))
    allowed = torch.rand(q, 20, generator=draw) < 0.6
    allowed[:, 0] = True  # every query sees something
    mask = torch.zeros(1, 1, q, 20, dtype=torch.float64).masked_fill_(~allowed, torch.finfo(torch.float64).min)
    out, weights = shared_kv_attention(module, query, key, value, mask, dropout=0.0, scaling=0.3)
    assert weights is None and out.shape == (1, q, 4, 8)
    torch.testing.assert_close(out, reference_attention(query, key, value, mask, 0.3), rtol=1e-12, atol=1e-12)
    # the query heads 0, 1 share key/value head 0: with heads paired the other way the result differs
    paired = torch.cat([key[:, 1:], key[:, :1]], dim=1)
    assert not torch.allclose(out, reference_attention(query, paired, value, mask, 0.3))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_model_in_the_scope_attends_with_shared_heads_and_computes_the_same(family):
    model = build_family(family)
    facts = check_model(model)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    allowed = torch.ones(6, 6, dtype=torch.bool).tril_()
    allowed[4, 2] = False  # a mask no causal flag expresses: transformers copies the heads for it
    mask = torch.zeros(1, 1, 6, 6, dtype=torch.float64).masked_fill_(~allowed, torch.finfo(torch.float64).min)
    inputs = dict(input_ids=ids, position_ids=torch.arange(6)[None], attention_mask=mask)
    with torch.no_grad():
        plain = model(**inputs, **{cache_arg(model): DynamicCache(config=model.config)}).logits
        with shared_kv_scope(model, facts):
            assert model.config._attn_implementation == SHARED_KV
            shared = model(**inputs, **{cache_arg(model): DynamicCache(config=model.config)}).logits
    assert model.config._attn_implementation == "sdpa"  # restored
    torch.testing.assert_close(shared, plain, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rows", [1, 3])
def test_an_eager_drafting_pass_attends_with_shared_heads_and_computes_the_same(rows):
    """A masked pass over the growing cache (a drafting step of `ModelRunner`, a batch's pass) attends
    with shared heads; transformers' own attention, what it computed before, would copy the whole
    cache once per query head. The same logits (float64), then the same argmax."""
    model = build_family("llama", seed=1)
    facts = check_model(model)
    seen = []
    hook = model.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: seen.append(model.config._attn_implementation))
    ids, positions = torch.tensor([[3, 1, 4, 1, 5, 9, 2]]).repeat(rows, 1), torch.arange(7).repeat(rows, 1)
    allowed = torch.ones(7, 7, dtype=torch.bool).tril_()
    allowed[5:, 3:5] = False  # a tree's mask: two branches after a shared prefix
    mask = torch.zeros(rows, 1, 7, 7, dtype=torch.float64).masked_fill_(~allowed, torch.finfo(torch.float64).min)
    with torch.no_grad():
        logits = {shared: batch_forward(model, replace(facts, shared_kv=shared), new_cache(model.config), ids, positions, mask)
                  for shared in (False, True)}
    hook.remove()
    assert seen == ["sdpa", SHARED_KV] and model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-12, atol=1e-12)
    assert torch.equal(logits[True].argmax(-1), logits[False].argmax(-1))


def test_a_pass_sent_no_mask_attends_over_the_whole_cache_with_shared_heads():
    """A prompt's prefill and a causal step send no mask: the model makes SDPA's. Without it, SDPA's
    causal flag over a cache longer than the step would cut the keys to the step's first q."""
    model = build_family("llama", seed=2)
    logits = {}
    for shared in (False, True):
        runner = ModelRunner(model, facts=replace(check_model(model), shared_kv=shared))
        runner.prefill(PROMPT, DecodeStats())
        logits[shared] = torch.cat([runner.forward(STEP), runner.forward(STEP[:1])])  # (3 + 1, V): causal, then one token
    torch.testing.assert_close(logits[True], logits[False], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family, attn", [("gpt2", "sdpa"), ("llama", "eager")])
def test_the_scope_leaves_other_models_as_they_are(family, attn):
    """A model with one key/value head per query head (GPT-2), or on eager attention, attends as it is."""
    model = build_family(family, attn=attn)
    with shared_kv_scope(model, check_model(model)):
        assert model.config._attn_implementation == attn
    assert model.config._attn_implementation == attn


def test_the_scope_restores_the_model_when_the_pass_fails():
    model = build_family("llama")
    with pytest.raises(RuntimeError, match="inside"), shared_kv_scope(model, check_model(model)):
        raise RuntimeError("inside")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("family, shared", [("llama", True), ("gpt2", False)])
def test_a_static_runners_timings_name_how_it_attends(family, shared):
    """Cost curves measured through steps that copied the heads are not reused for steps that share them."""
    runner = StaticRunner(family_model(family), 32)
    assert ("kv_heads=shared" in runner.details()) == shared
    assert ("span=used" in runner.details()) == shared  # its steps attend over the slots they use (`span`)


def poison_past_span(runner: StaticRunner, width: int) -> None:
    """NaN in every static slot past the next step's span (length + width), keys and values of every layer."""
    with torch.inference_mode():  # the buffers are inference tensors
        for layer in runner.cache.layers:
            layer.keys[..., runner.length + width:, :] = float("nan")
            layer.values[..., runner.length + width:, :] = float("nan")


PROMPT, STEP = torch.tensor([3, 1, 4, 1, 5, 9]), torch.tensor([2, 6, 5])


@pytest.mark.parametrize("family, cuts", [("llama", True), ("qwen2", True), ("gpt2", False)])
def test_a_static_step_attends_over_the_slots_it_uses(family, cuts):
    """A static step whose keys are cut to its span reads no slot past length + w: with NaN there its
    logits are still the dynamic cache's (float64). A step over all M slots (GPT-2, whose heads
    are not grouped, so its attention is transformers' own) reads them: the negative control."""
    model = family_model(family)
    runner, oracle = StaticRunner(model, 32), ModelRunner(model)
    for r in (runner, oracle):
        r.prefill(PROMPT, DecodeStats())
    assert runner.cuts() == cuts and runner.span(3) == (runner.length + 3 if cuts else 32)
    poison_past_span(runner, 3)
    logits = runner.forward(STEP)
    if cuts:
        torch.testing.assert_close(logits, oracle.forward(STEP), rtol=1e-10, atol=1e-10)
    else:
        assert torch.isnan(logits).all()


@pytest.mark.slow
def test_a_packaged_step_attends_over_the_slots_it_uses_and_one_compiled_in_process_over_all(tmp_path):
    """A package's span is a dynamic dimension (traced at M it would be pinned there, silently): its
    steps read no slot past length + w. A step compiled in the process keeps one shape, all M slots,
    and reads the NaN there (the negative control)."""
    model = build_tiny("llama", 16, 1).float()
    packaged = StaticRunner(model, 32, compile_mode="default", widths=(1, 4), compile_dir=tmp_path)
    own = StaticRunner(model, 32, compile_mode="default", widths=(4,))
    oracle = ModelRunner(model)
    for r in (packaged, own, oracle):
        r.prefill(PROMPT, DecodeStats())
    for r in (packaged, own):
        r.compile()
    assert packaged.cuts() and not own.cuts() and "span=used" in packaged.details() and "span=used" not in own.details()
    expected = oracle.forward(STEP)
    for r in (packaged, own):
        poison_past_span(r, 4)
    torch.testing.assert_close(packaged.forward(STEP), expected, rtol=1e-4, atol=1e-4)
    assert torch.isnan(own.forward(STEP)).all()
