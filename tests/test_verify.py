"""Task 1.3: greedy verification of a draft tree accepts exactly greedy's tokens, as many as it can."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref import DraftTree
from ladref.verify import verify_greedy

pytestmark = pytest.mark.task1_3


def test_full_match_accepts_the_path_plus_one():
    tree = DraftTree.from_paths([[7, 8, 9]], "s")  # N = 4
    verdict = verify_greedy(tree, 7, torch.tensor([8, 9, 3]))
    assert verdict.tokens.tolist() == [7, 8, 9, 3] and verdict.path == [0, 1, 2] and verdict.matched == 3


def test_no_match_accepts_the_models_own_token():
    verdict = verify_greedy(DraftTree.from_paths([[1, 2], [3, 4]], "s"), 5, torch.tensor([2, 0, 4, 0]))
    assert verdict.tokens.tolist() == [5] and verdict.path == [] and verdict.matched == 0


def test_the_branch_greedy_takes_wins():
    tree = DraftTree.from_paths([[5, 1, 1], [5, 6, 1], [9, 6, 7]], "s")  # nodes 5, 1, 1, 6, 1, 9, 6, 7
    preds = torch.tensor([6, 0, 0, 2, 0, 6, 7, 8])  # argmax after each node
    verdict = verify_greedy(tree, 5, preds)
    assert verdict.tokens.tolist() == [5, 6, 2] and verdict.path == [0, 3]


def test_no_drafts_is_one_greedy_step():
    verdict = verify_greedy(DraftTree.empty(), 4, torch.empty(0, dtype=torch.long))
    assert verdict.tokens.tolist() == [4] and verdict.path == []


@given(st.data(), st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), max_size=7))
def test_accepted_tokens_follow_the_greedy_chain(data, paths):
    # a fixed "model": the argmax after token t is next_of[t]; greedy from y_1 is the chain
    next_of = data.draw(st.lists(st.integers(0, 4), min_size=5, max_size=5))
    first = data.draw(st.integers(0, 4))
    tree = DraftTree.from_paths(paths, "s")
    verdict = verify_greedy(tree, first, torch.tensor(next_of)[tree.tokens])
    chain = [first]
    while len(chain) < 7:
        chain.append(next_of[chain[-1]])
    k = verdict.matched
    assert verdict.tokens.tolist() == chain[: k + 1]  # exactly greedy's tokens
    assert verdict.path == tree.find_path(chain[:k])  # along the tree
    assert len(tree.find_path(chain[: k + 1])) == k  # and no further: the next greedy token is not a child there
