"""A deferred prefill: the prompt but its last token runs in the first step's pass, and nothing else changes."""

from __future__ import annotations

import pytest
import torch
from strategies import ARCHITECTURES, tiny_model

from ladref import DecodeStats, DraftTree
from ladref.fast.static import StaticRunner
from ladref.masks import build_step_inputs, prepend_prompt
from ladref.runner import ModelRunner

pytestmark = pytest.mark.usefixtures("one_thread")


def test_prepend_prompt_puts_a_causal_prompt_before_the_step():
    allowed = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # a root and two branches
    ids, positions, whole, keep = prepend_prompt(torch.tensor([7, 8]), torch.tensor([1, 2, 3]), torch.tensor([2, 3, 3]),
                                                 allowed, torch.tensor([0, 2]))
    assert ids.tolist() == [7, 8, 1, 2, 3] and positions.tolist() == [0, 1, 2, 3, 3] and keep.tolist() == [2, 4]
    assert whole.int().tolist() == [[1, 0, 0, 0, 0],
                                    [1, 1, 0, 0, 0],
                                    [1, 1, 1, 0, 0],
                                    [1, 1, 1, 1, 0],
                                    [1, 1, 1, 0, 1]]
    # a causal step stays causal (no mask to send), its default positions too; every row kept
    ids, positions, whole, keep = prepend_prompt(torch.tensor([7, 8]), torch.tensor([1, 2]), None, None, None)
    assert ids.tolist() == [7, 8, 1, 2] and positions is None and whole is None and keep.tolist() == [2, 3]


def runner_of(kind: str, model: torch.nn.Module):
    """A dynamic-cache runner, or a static one whose steps pad to width 16 (its deferred first step does not)."""
    return ModelRunner(model) if kind == "dynamic" else StaticRunner(model, 32, widths=(16,))


def cached(runner) -> list[torch.Tensor]:
    """Every layer's keys and values in the runner's committed slots."""
    length = runner.past_len
    return [getattr(layer, name)[..., :length, :] for layer in runner.cache.layers for name in ("keys", "values")]


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("shape", ["tree", "chain"])
@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_the_first_step_gets_the_logits_and_cache_of_a_prefill_of_its_own(arch, shape, kind):
    model, prompt = tiny_model(arch, 16, 3), torch.tensor([3, 1, 4, 1, 5, 9])
    window = torch.randint(0, 16, (2, 3), generator=torch.Generator().manual_seed(0)) if shape == "tree" else None
    tree = DraftTree.from_paths([[2, 6, 5], [2, 9], [9]] if shape == "tree" else [[2, 6, 5]], "s")
    apart, deferred = runner_of(kind, model), runner_of(kind, model)
    logits, passes = [], []
    for runner, defer in ((apart, False), (deferred, True)):
        calls = []
        handle = model.register_forward_hook(lambda *args: calls.append(1))
        try:
            current = runner.prefill(prompt, DecodeStats(), defer=defer)
            assert runner.past_len == len(prompt) - 1  # counted before it is cached
            step = build_step_inputs(current, window, tree, runner.past_len)
            allowed = None if step.layout.is_causal else step.allowed
            keep = torch.tensor([0, step.layout.length - 1])
            logits.append(runner.forward(step.input_ids, step.position_ids, allowed, keep))  # (2, V)
            runner.commit(len(prompt) - 1, torch.tensor([0, step.layout.length - 1]))
        finally:
            handle.remove()
        passes.append(len(calls))
    assert passes == [2, 1]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-10, atol=1e-10)
    assert apart.past_len == deferred.past_len == len(prompt) + 1
    for mine, theirs in zip(cached(deferred), cached(apart), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_a_one_token_prompt_has_nothing_to_defer_and_a_new_call_forgets_a_deferred_prompt(kind):
    model = tiny_model("llama", 16, 0)
    runner = runner_of(kind, model)
    assert runner.prefill(torch.tensor([5]), DecodeStats(), defer=True) == 5 and runner.past_len == 0
    runner.prefill(torch.tensor([1, 2, 3]), DecodeStats(), defer=True)
    assert runner.past_len == 2 and runner.pending.tolist() == [1, 2]
    runner.prefill(torch.tensor([4, 5, 6, 7]), DecodeStats())  # a new call, cached at once
    assert runner.pending is None and runner.past_len == 3
    fresh = runner_of(kind, model)
    fresh.prefill(torch.tensor([1, 2, 3]), DecodeStats(), defer=True)
    fresh.empty()  # nothing cached yet: forgetting is not an error
    assert fresh.past_len == 0 and fresh.pending is None
