"""Task 1.1: the combined step's inputs and attention mask (paper Fig. 5, plus a draft tree)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import tiny_model

from ladref import DraftTree
from ladref.masks import StepLayout, build_step_inputs, render, static_additive, to_additive
from ladref.runner import ModelRunner

pytestmark = pytest.mark.task1_1

trees = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=4), max_size=5).map(lambda p: DraftTree.from_paths(p, "s"))
layouts = st.builds(StepLayout, st.integers(0, 6), st.integers(2, 5), trees)


def seen_sequence(layout: StepLayout, i: int) -> list[int]:
    """The flat indices token i attends to, ordered by position (one causal sequence, see below)."""
    offsets, row = layout.position_offsets(), layout.allowed()[i]
    return sorted(torch.nonzero(row).flatten().tolist(), key=lambda j: int(offsets[j]))


@given(layouts)
def test_every_token_sees_one_complete_causal_sequence(layout):
    # the tokens a query sees sit at positions 0, 1, .., its own position: exactly one each
    offsets, allowed = layout.position_offsets(), layout.allowed()
    for i in range(layout.length):
        assert sorted(offsets[allowed[i]].tolist()) == list(range(int(offsets[i]) + 1))
        assert allowed[i, i] and allowed[i, 0]  # itself, and the current token


@given(layouts)
def test_branches_never_see_each_other(layout):
    allowed, L = layout.allowed(), layout.lookahead_len
    assert not allowed[:L, L:].any()  # lookahead never sees a draft
    assert not allowed[L:, 1:L].any()  # drafts see only the current token of the window


@given(layouts)
def test_a_draft_sees_its_root_path(layout):
    allowed, L = layout.allowed(), layout.lookahead_len
    for node in range(len(layout.tree)):
        assert torch.nonzero(allowed[L + node, L:]).flatten().tolist() == layout.tree.path(node)


def test_figure_5_layout():
    # W = 5, N = 4, two candidate n-grams as separate chains: 3 * 5 window tokens + 2 * 3 draft tokens
    layout = StepLayout(5, 4, DraftTree.chains([[7, 8, 9], [6, 5, 4]], "pool"))
    assert layout.length == 21
    assert layout.position_offsets().tolist() == [0, 1, 2, 3, 4, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 1, 2, 3, 1, 2, 3]
    assert layout.last_row_index().tolist() == [10, 11, 12, 13, 14]
    assert layout.tree_index().tolist() == list(range(15, 21))
    picture = render(layout.allowed())  # cell (2, 1) sees (0, 0), (0, 1), (1, 1) and itself
    assert picture.splitlines()[11].split()[1] == "##....#....#........."
    assert picture.splitlines()[20].split()[1] == "#.................###"


def test_a_trie_feeds_a_shared_prefix_once():
    chains = StepLayout(2, 4, DraftTree.chains([[7, 8, 9], [7, 8, 5]], "pool"))
    trie = StepLayout(2, 4, DraftTree.from_paths([[7, 8, 9], [7, 8, 5]], "pool"))
    assert chains.length - trie.length == 2 and trie.position_offsets()[-4:].tolist() == [1, 2, 3, 3]


def test_build_step_inputs_places_tokens():
    window = torch.arange(10, 22).view(3, 4)  # (N-1, W) = (3, 4)
    step = build_step_inputs(5, window, DraftTree.from_paths([[7, 8, 9]], "s"), position=100)
    assert step.input_ids.tolist() == [5] + list(range(11, 22)) + [7, 8, 9]
    assert step.position_ids[:4].tolist() == [100, 101, 102, 103]
    assert step.position_ids[-3:].tolist() == [101, 102, 103]
    alone = build_step_inputs(5, None, DraftTree.from_paths([[7, 8], [6]], "s"), position=10)
    assert alone.input_ids.tolist() == [5, 7, 8, 6] and alone.position_ids.tolist() == [10, 11, 12, 11]
    assert alone.layout.lookahead_len == 1 and not alone.layout.is_causal
    assert build_step_inputs(5, None, DraftTree.from_paths([[7, 8]], "s"), 0).layout.is_causal


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_additive_form(dtype):
    allowed = StepLayout(3, 3, DraftTree.from_paths([[1, 2]], "s")).allowed()
    mask = to_additive(allowed, past_len=4, dtype=dtype)
    q = allowed.shape[0]
    assert mask.shape == (1, 1, q, 4 + q) and mask.dtype == dtype
    assert (mask[0, 0, :, :4] == 0).all()  # everyone sees the KV cache
    assert torch.equal(mask[0, 0, :, 4:] == 0, allowed)
    assert (mask[0, 0, :, 4:][~allowed] == torch.finfo(dtype).min).all()


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_masked_step_logits_equal_plain_causal_forward(arch):
    """Every token of a combined step gets the logits a plain forward over its own sequence gives."""
    model = tiny_model(arch, 16, 1)
    prompt = torch.tensor([3, 1, 4, 1, 5])
    window = torch.randint(0, 16, (3, 4), generator=torch.Generator().manual_seed(0))
    tree = DraftTree.from_paths([[2, 6, 5], [2, 9], [9, 9, 9]], "s")
    runner = ModelRunner(model)
    runner.forward(prompt[:-1])
    step = build_step_inputs(int(prompt[-1]), window, tree, runner.past_len)
    logits = runner.forward(step.input_ids, step.position_ids, step.allowed)  # (q, V)
    for i in range(step.layout.length):
        sequence = torch.cat([prompt[:-1], step.input_ids[seen_sequence(step.layout, i)]])
        expected = model(sequence[None]).logits[0, -1]
        torch.testing.assert_close(logits[i], expected, rtol=1e-9, atol=1e-9)


@given(st.integers(1, 6), st.integers(2, 5), trees, st.integers(0, 20), st.integers(0, 6))
def test_static_mask_is_the_step_mask_placed_in_the_static_cache(W, N, tree, length, spare):
    allowed = StepLayout(W, N, tree).allowed()
    q = allowed.shape[0]
    max_length = length + q + spare
    mask = static_additive(allowed, torch.tensor(length), max_length, torch.float64)[0, 0]  # (q, M)
    expected = to_additive(allowed, length, torch.float64)[0, 0]  # (q, length + q)
    assert mask.shape == (q, max_length)
    assert torch.equal(mask[:, : length + q], expected)
    assert (mask[:, length + q :] == torch.finfo(torch.float64).min).all()  # stale and unused slots hidden


@st.composite
def any_tree_layouts(draw) -> StepLayout:
    """A layout whose tree has any shape, repeated tokens included (chains, not only tries)."""
    n = draw(st.integers(0, 6))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    tokens = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    tree = DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long), ("s",) * n)
    return StepLayout(draw(st.integers(0, 5)), draw(st.integers(2, 5)), tree)


@given(any_tree_layouts())
def test_a_draft_of_any_tree_sees_the_current_token_and_its_ancestors(layout):
    """Whatever the tree's shape: every token sees itself, and tree node i sees exactly the current
    token and row i of `tree.ancestors()` (its ancestors and itself), at position p + its depth."""
    allowed, L, n = layout.allowed(), layout.lookahead_len, len(layout.tree)
    assert allowed.dtype == torch.bool and allowed.shape == (L + n, L + n)
    assert allowed.diagonal().all()
    assert torch.equal(allowed[L:, L:], layout.tree.ancestors())
    assert allowed[L:, 0].all() and not allowed[L:, 1:L].any()
    assert layout.position_offsets()[L:].tolist() == layout.tree.depths.tolist()
