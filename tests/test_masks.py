"""Task 1.1: the combined step's inputs and attention mask (paper Fig. 5)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import tiny_model

from ladref.masks import (
    StepLayout,
    build_step_inputs,
    pad_candidates,
    render,
    static_additive,
    to_additive,
)
from ladref.runner import ModelRunner

pytestmark = pytest.mark.task1_1

layouts = st.builds(StepLayout, st.integers(1, 8), st.integers(2, 6), st.integers(0, 8))


def seen_sequence(layout: StepLayout, i: int) -> list[int]:
    """The flat indices token i may see, in position order: the causal sequence its logits continue."""
    offsets, allowed = layout.position_offsets(), layout.allowed()
    return sorted(allowed[i].nonzero().flatten().tolist(), key=lambda j: int(offsets[j]))


@given(layouts)
def test_every_token_sees_one_complete_causal_sequence(layout):
    # the tokens a query sees sit at positions 0, 1, .., its own position: exactly one each
    offsets, allowed = layout.position_offsets(), layout.allowed()
    for i in range(layout.length):
        seen = sorted(offsets[allowed[i]].tolist())
        assert seen == list(range(int(offsets[i]) + 1))


@given(layouts)
def test_branches_never_see_each_other(layout):
    allowed, L = layout.allowed(), layout.lookahead_len
    assert not allowed[:L, L:].any()  # lookahead never sees a candidate
    assert not allowed[L:, 1:L].any()  # candidates see only the current token of the window
    assert allowed[L:, 0].all() if layout.num_candidates else True


FIGURE_5 = """
#....................
##...................
###..................
####.................
#####................
#....#...............
##....#..............
###....#.............
####....#............
#####....#...........
#....#....#..........
##....#....#.........
###....#....#........
####....#....#.......
#####....#....#......
#..............#.....
#..............##....
#..............###...
#.................#..
#.................##.
#.................###
"""


def test_figure_5_layout():
    # W = 5, N = 4, two candidates: 3 * 5 window tokens + 2 * 3 candidate tokens
    layout = StepLayout(5, 4, 2)
    assert layout.length == 21
    assert layout.position_offsets().tolist() == [0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 1, 2, 3, 1, 2, 3]
    assert layout.last_row_index().tolist() == [10, 11, 12, 13, 14]
    assert layout.candidate_index().tolist() == [[15, 16, 17], [18, 19, 20]]
    picture = [line.split()[1] for line in render(layout.allowed()).splitlines()]
    assert picture[11] == "##....#....#........."  # cell (2, 1) sees (0, 0), (0, 1), (1, 1) and itself
    assert picture == FIGURE_5.split()  # the paper's Figure 5, row by row


@given(layouts)
def test_every_token_sees_itself_and_the_current_token(layout):
    allowed = layout.allowed()
    assert allowed.dtype == torch.bool and allowed.shape == (layout.length, layout.length)
    assert allowed.diagonal().all() and allowed[:, 0].all()
    assert not allowed.triu(1)[: layout.lookahead_len].any()  # the window only looks back in flat order


def test_build_step_inputs_places_tokens():
    window = torch.arange(10, 22).view(3, 4)  # (N-1, W) = (3, 4)
    candidates = torch.tensor([[7, 8, 9]])  # (g, N-1)
    step = build_step_inputs(5, window, candidates, position=100)
    assert step.input_ids.tolist() == [5] + list(range(11, 22)) + [7, 8, 9]
    assert step.position_ids[:4].tolist() == [100, 101, 102, 103]
    assert step.position_ids[-3:].tolist() == [101, 102, 103]
    with pytest.raises(ValueError, match="N-1"):
        build_step_inputs(5, window, torch.tensor([[1, 2]]), 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_additive_form(dtype):
    allowed = StepLayout(3, 3, 1).allowed()
    mask = to_additive(allowed, past_len=4, dtype=dtype)
    q = allowed.shape[0]
    assert mask.shape == (1, 1, q, 4 + q) and mask.dtype == dtype
    assert (mask[0, 0, :, :4] == 0).all()  # everyone sees the KV cache
    assert torch.equal(mask[0, 0, :, 4:] == 0, allowed)
    assert (mask[0, 0, :, 4:][~allowed] == torch.finfo(dtype).min).all()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_masked_step_logits_equal_plain_causal_forward(arch):
    """Every token of a combined step gets the logits a plain forward over the tokens it sees gives."""
    model = tiny_model(arch, 16, 1)
    prompt = torch.tensor([3, 1, 4, 1, 5])
    window = torch.randint(0, 16, (3, 4), generator=torch.Generator().manual_seed(0))
    candidates = torch.tensor([[2, 6, 5], [9, 9, 9]])
    runner = ModelRunner(model)
    runner.forward(prompt[:-1])
    step = build_step_inputs(int(prompt[-1]), window, candidates, runner.past_len)
    logits = runner.forward(step.input_ids, step.position_ids, step.allowed)  # (q, V)
    for i in range(step.layout.length):
        sequence = torch.cat([prompt[:-1], step.input_ids[seen_sequence(step.layout, i)]])
        expected = model(sequence[None]).logits[0, -1]
        torch.testing.assert_close(logits[i], expected, rtol=1e-9, atol=1e-9)


@given(st.integers(1, 6), st.integers(2, 5), st.integers(0, 4), st.integers(0, 20), st.integers(0, 6))
def test_static_mask_is_the_step_mask_placed_in_the_static_cache(W, N, g, length, spare):
    allowed = StepLayout(W, N, g).allowed()
    q = allowed.shape[0]
    max_length = length + q + spare
    mask = static_additive(allowed, torch.tensor(length), max_length, torch.float64)[0, 0]  # (q, M)
    expected = to_additive(allowed, length, torch.float64)[0, 0]  # (q, length + q)
    assert mask.shape == (q, max_length)
    assert torch.equal(mask[:, : length + q], expected)
    assert (mask[:, length + q :] == torch.finfo(torch.float64).min).all()  # stale and unused slots hidden


def test_padded_candidates_are_isolated_dummies():
    candidates = torch.tensor([[4, 5, 6], [4, 7, 8]])
    padded = pad_candidates(candidates, 4, fill=9)
    assert padded.tolist() == [[4, 5, 6], [4, 7, 8], [9, 9, 9], [9, 9, 9]]
    allowed = build_step_inputs(9, torch.zeros(3, 2, dtype=torch.long), padded, 0).allowed
    layout = StepLayout(2, 4, 4)
    real, dummy = layout.candidate_index()[:2].flatten(), layout.candidate_index()[2:].flatten()
    assert not allowed[:, dummy][~torch.isin(torch.arange(allowed.shape[0]), dummy)].any()  # nobody else sees a dummy
    assert not allowed[real][:, dummy].any()
    with pytest.raises(ValueError, match="do not fit"):
        pad_candidates(candidates, 1, fill=9)
