"""Ragged acceptance: each row of a batch commits its own accepted draft path into one padded KV cache."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import tiny_model

from ladref import greedy_decode
from ladref.batch import BatchRunner, Request, ragged_commit_plan
from ladref.runner import ModelRunner, check_model

pytestmark = [pytest.mark.task1_6, pytest.mark.usefixtures("one_thread")]


@st.composite
def batches(draw):
    """(lengths, past, widths, accepted): B rows, each with its own length, step width and accepted indices."""
    rows = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.integers(0, 8), min_size=rows, max_size=rows))
    past = max(lengths) + draw(st.integers(0, 3))  # padding after the longest row, sometimes
    widths = draw(st.lists(st.integers(1, 6), min_size=rows, max_size=rows))
    accepted = [draw(st.permutations(range(q)))[: draw(st.integers(0, q))] for q in widths]  # any order: a path's
    return lengths, past, widths, accepted


def test_each_rows_accepted_entries_land_after_its_own_length():
    """A worked example: each row's accepted entries move from past + index to the slots right after its own length."""
    # row 0: 3 committed slots, a step of 3 at slots 4..6 keeps its entries 0 and 2;
    # row 1: 1 committed slot, a step of 4 at slots 4..7 keeps 0, 1 and 3
    rows, sources, targets, lengths = ragged_commit_plan([3, 1], 4, [3, 4], [torch.tensor([0, 2]), torch.tensor([0, 1, 3])])
    assert rows.tolist() == [0, 0, 1, 1, 1]
    assert sources.tolist() == [4, 6, 4, 5, 7]
    assert targets.tolist() == [3, 4, 1, 2, 3]
    assert lengths.tolist() == [5, 4]


def test_the_plan_is_long_tensors_row_by_row_in_path_order():
    """1-D long tensors, row 0's moves first, each row's in the order given; a row that keeps nothing, and B = 0."""
    rows, sources, targets, lengths = ragged_commit_plan([2, 2, 0], 2, [4, 1, 3], [[3, 0], [], [2, 1, 0]])
    assert all(t.dtype == torch.long and t.dim() == 1 for t in (rows, sources, targets, lengths))
    assert rows.tolist() == [0, 0, 2, 2, 2]  # a row that keeps nothing has no move
    assert sources.tolist() == [5, 2, 4, 3, 2]  # the order given (a path's), not sorted
    assert targets.tolist() == [2, 3, 0, 1, 2]
    assert lengths.tolist() == [4, 2, 3]
    empty = ragged_commit_plan([], 0, [], [])
    assert [t.tolist() for t in empty] == [[], [], [], []] and all(t.dtype == torch.long for t in empty)


@given(batches())
def test_applying_the_plan_leaves_each_row_its_committed_slots_then_its_path(batch):
    """Any batch (Hypothesis): after the moves, each row's first new_lengths[b] slots hold its committed slots, then its
    accepted entries in path order."""
    lengths, past, widths, accepted = batch
    cache = torch.arange(len(lengths))[:, None] * 1000 + torch.arange(past + max(widths))  # (B, T): row * 1000 + slot
    rows, sources, targets, new_lengths = ragged_commit_plan(torch.tensor(lengths), past, torch.tensor(widths),
                                                             [torch.tensor(a, dtype=torch.long) for a in accepted])
    assert len(rows) == len(sources) == len(targets) == sum(len(a) for a in accepted)
    cache[rows, targets] = cache[rows, sources]
    for b, (length, kept) in enumerate(zip(lengths, accepted)):
        assert new_lengths[b] == length + len(kept)
        assert cache[b, : new_lengths[b]].tolist() == [b * 1000 + s for s in [*range(length), *(past + i for i in kept)]]


@pytest.mark.parametrize("lengths, past, widths, accepted", [
    ([3, 1], 4, [3, 4], [[0, 3], [0]]),  # index 3 outside row 0's step of 3
    ([3, 1], 4, [3, 4], [[0], [-1]]),  # a negative index
    ([5, 1], 4, [3, 4], [[0], [0]]),  # row 0 holds more slots than the step's start
    ([3, 1], 4, [3], [[0], [0]]),  # two rows, one width
    ([3, 1], 4, [3, 4], [[0]]),  # two rows, one accepted list
])
def test_inconsistent_plans_are_refused(lengths, past, widths, accepted):
    """ValueError: an index outside its row's step, a length past `past`, or arguments with different numbers of rows."""
    with pytest.raises(ValueError):
        ragged_commit_plan(lengths, past, widths, [torch.tensor(a, dtype=torch.long) for a in accepted])


def test_a_batch_of_ragged_prompts_decodes_each_row_as_alone():
    """A batch's pass keeps every row's whole step (a plan that accepts everything)."""
    model = tiny_model("llama", 16, 0)
    batch = [[1, 2, 3, 4, 5], [6], [7, 8]]
    result = greedy_decode(model, batch, [6, 4, 5], eos_token_id=[])
    assert [row.token_ids for row in result] == [greedy_decode(model, p, n, eos_token_id=[]).token_ids
                                                 for p, n in zip(batch, [6, 4, 5])]


def two_branches(current: int, first: list[int], second: list[int], length: int) -> Request:
    """A step of the current token and two drafted chains after it, each seeing the current token and its own earlier tokens."""
    q, a = 1 + len(first) + len(second), 1 + len(first)
    allowed = torch.zeros(q, q, dtype=torch.bool)
    allowed[:, 0] = True
    allowed[1:a, 1:a] = torch.ones(a - 1, a - 1, dtype=torch.bool).tril()
    allowed[a:, a:] = torch.ones(q - a, q - a, dtype=torch.bool).tril()
    positions = length + torch.tensor([0, *range(1, a), *range(1, q - a + 1)])
    return Request(torch.tensor([current, *first, *second]), positions, allowed, torch.arange(q))


def test_rows_commit_other_branches_of_their_steps_into_one_cache():
    """Two rows of different lengths each keep a different branch of their step; each row's cache
    then holds what a plain forward over its committed tokens computes."""
    model = tiny_model("qwen2", 16, 1)
    batch = BatchRunner(model, check_model(model), 2)
    prompts = [[3, 1, 4, 1, 5], [9, 2]]
    for step in ([Request(torch.tensor(p), torch.arange(len(p)), torch.ones(len(p), len(p), dtype=torch.bool).tril(),
                          torch.arange(len(p))) for p in prompts],
                 [two_branches(6, [7, 8], [9, 10, 11], 5), two_branches(12, [13], [14, 15], 2)]):
        batch.waiting = dict(zip(batch.rows, step))
        batch._pass()  # one forward pass for both rows
    lengths = [row.length for row in batch.rows]
    assert lengths == [5 + 6, 2 + 4]  # each row keeps its whole step until it commits
    with torch.inference_mode():  # as in a decoding call: the cache holds inference tensors
        batch.rows[0].commit(5, torch.tensor([0, 3, 4]))  # row 0: the current token, then the second branch's 9, 10
        batch.rows[1].commit(2, torch.tensor([0, 1]))  # row 1: the current token, then the first branch's 13
    committed = [[3, 1, 4, 1, 5, 6, 9, 10], [9, 2, 12, 13]]
    assert [row.length for row in batch.rows] == [len(c) for c in committed]
    for b, tokens in enumerate(committed):
        alone = ModelRunner(model)
        alone.forward(torch.tensor(tokens))
        for ours, theirs in zip(batch.cache.layers, alone.cache.layers):
            assert torch.allclose(ours.keys[b, :, : len(tokens)], theirs.keys[0], atol=1e-9)
            assert torch.allclose(ours.values[b, :, : len(tokens)], theirs.values[0], atol=1e-9)
