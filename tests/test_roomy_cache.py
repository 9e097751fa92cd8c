"""The cache layer with room to spare (`ladref.hf_internals.RoomyLayer`): a pass writes its entries in place,
and under every operation ladref performs on a cache it holds what transformers' `DynamicLayer` holds."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import ARCHITECTURES, tiny_model
from transformers import DynamicLayer

from ladref.hf_internals import SPARE, RoomyLayer, new_cache
from ladref.runner import ModelRunner

# one operation on a cache: a pass of q entries, a cut to the first n slots (a commit, a trim), keeping
# some batch rows (set from outside, or as `trim_cache` drops a finished row), or moving entries within
# the cache in place (a ragged commit)
operations = st.lists(st.one_of(
    st.tuples(st.just("pass"), st.integers(1, 9)),
    st.tuples(st.just("cut"), st.integers(0, 12)),
    st.tuples(st.just("rows"), st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("rows"), st.permutations([0, 1, 2])),  # the same rows in another order: same shapes, new tensors
    st.tuples(st.just("select"), st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)),  # as `trim_cache` does
    st.tuples(st.just("move"), st.integers(0, 12), st.integers(0, 12)),
), max_size=30)


def apply(layer: DynamicLayer, operation: tuple, draw: torch.Generator) -> None:
    """Do `operation` on `layer` as ladref's cache code does it (`ModelRunner.commit`, `trim_cache`, `move_row_slots`)."""
    kind, *args = operation
    if kind == "pass":
        rows = layer.keys.shape[0] if layer.is_initialized and layer.keys.dim() == 4 else 3
        layer.update(*(torch.randn(rows, 2, args[0], 4, generator=draw, dtype=torch.float64) for _ in range(2)))
        return
    if not layer.is_initialized or layer.keys.dim() != 4:
        return
    if kind == "cut":
        layer.keys, layer.values = (t[..., : args[0], :] for t in (layer.keys, layer.values))
    elif kind in ("rows", "select"):
        rows = torch.tensor([r for r in args[0] if r < layer.keys.shape[0]] or [0])
        if kind == "select":
            layer.batch_select_indices(rows)
        else:
            layer.keys, layer.values = (t.index_select(0, rows) for t in (layer.keys, layer.values))
    elif layer.keys.shape[-2]:  # move: slot src to slot dst, in place, every row
        src, dst = (min(a, layer.keys.shape[-2] - 1) for a in args)
        for t in (layer.keys, layer.values):
            t[:, :, dst] = t[:, :, src].clone()


@given(operations, st.integers(0, 2**31 - 1))
def test_a_roomy_layer_holds_what_a_dynamic_layer_holds(steps, seed):
    roomy, plain = RoomyLayer(), DynamicLayer()
    for operation in steps:
        for layer in (roomy, plain):
            apply(layer, operation, torch.Generator().manual_seed(seed))  # the same entries in both
        seed += 1
        if plain.is_initialized and plain.keys.dim() == 4:
            assert torch.equal(roomy.keys, plain.keys) and torch.equal(roomy.values, plain.values)
            assert roomy.get_seq_length() == plain.get_seq_length()


def test_passes_write_in_place_and_the_buffers_grow_only_when_full():
    layer, shape = RoomyLayer(), (2, 3, 1, 4)
    layer.update(torch.ones(shape), torch.ones(shape))
    buffers = layer.room
    assert buffers[0].shape[-2] == 1 + SPARE  # room for SPARE more
    for _ in range(SPARE):
        keys, _ = layer.update(torch.ones(shape), torch.ones(shape))
        assert layer.room is buffers and keys.data_ptr() == buffers[0].data_ptr()  # no copy: a view of the same buffer
    layer.update(torch.ones(shape), torch.ones(shape))  # full: new buffers
    assert layer.room is not buffers and layer.get_seq_length() == SPARE + 2
    assert layer.room[0].shape[-2] == SPARE + 2 + SPARE  # an eighth of 66 is less than SPARE


def test_a_tensor_set_from_outside_is_never_taken_for_the_buffers_even_when_it_looks_like_them():
    """Rows reordered when the buffers were exactly full: a new tensor with the buffers' strides, then cut."""
    roomy, plain = RoomyLayer(), DynamicLayer()
    for seed, operation in enumerate([("pass", 1), ("pass", SPARE), ("rows", [2, 0, 1]), ("cut", SPARE), ("pass", 1)]):
        for layer in (roomy, plain):
            apply(layer, operation, torch.Generator().manual_seed(seed))  # the same entries in both
        assert torch.equal(roomy.keys, plain.keys) and torch.equal(roomy.values, plain.values)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_runners_cache_is_roomy_and_a_step_rolls_back_within_its_buffers(arch):
    model = tiny_model(arch, 16, 0)
    assert all(isinstance(layer, RoomyLayer) for layer in new_cache(model.config).layers)
    runner = ModelRunner(model)
    runner.forward(torch.tensor([1, 2, 3, 4, 5]))
    buffers = [layer.room for layer in runner.cache.layers]
    branches = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # 6, then 7 or 8 after it
    runner.forward(torch.tensor([6, 7, 8]), torch.tensor([5, 6, 6]), branches)
    runner.commit(5, torch.tensor([0, 2]))  # keep 6 and 8: the second branch's path
    assert runner.past_len == 7 and all(layer.room is room for layer, room in zip(runner.cache.layers, buffers))
    plain = ModelRunner(model)  # the kept tokens fed in order: 6 at position 5, 8 at position 6
    plain.forward(torch.tensor([1, 2, 3, 4, 5, 6]))
    plain.forward(torch.tensor([8]), torch.tensor([6]))
    for mine, theirs in zip(runner.cache.layers, plain.cache.layers, strict=True):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-10, atol=1e-10)
