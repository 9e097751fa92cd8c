"""Task 1.3: greedy verification accepts 1..N tokens, exactly greedy's."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref.verify import verify_greedy

pytestmark = pytest.mark.task1_3


def test_full_match_accepts_all_n_tokens():
    candidates = torch.tensor([[7, 8, 9]])  # N = 4
    verdict = verify_greedy(candidates, torch.tensor(7), torch.tensor([[8, 9, 3]]))
    assert verdict.tokens.tolist() == [7, 8, 9, 3] and verdict.matched == 3 and verdict.best == 0


def test_no_match_accepts_the_models_own_token():
    verdict = verify_greedy(torch.tensor([[1, 2], [3, 4]]), torch.tensor(5), torch.tensor([[2, 0], [4, 0]]))
    assert verdict.tokens.tolist() == [5] and verdict.matched == 0 and verdict.best is None


def test_longest_prefix_wins():
    candidates = torch.tensor([[5, 1, 1], [5, 6, 1], [9, 6, 7]])
    preds = torch.tensor([[0, 0, 0], [6, 2, 0], [6, 7, 8]])  # argmax after each candidate token
    verdict = verify_greedy(candidates, torch.tensor(5), preds)
    assert verdict.tokens.tolist() == [5, 6, 2] and verdict.best == 1 and verdict.matched == 2


def test_no_candidates_is_one_greedy_step():
    verdict = verify_greedy(torch.empty(0, 3, dtype=torch.long), torch.tensor(4), torch.empty(0, 3, dtype=torch.long))
    assert verdict.tokens.tolist() == [4] and verdict.best is None and verdict.matched == 0


@given(st.data(), st.integers(0, 6), st.integers(1, 5))
def test_accepted_tokens_follow_the_greedy_chain(data, g, n_minus_1):
    # a fixed "model": the argmax after token t is next_of[t]; greedy from y_1 is the chain
    next_of = data.draw(st.lists(st.integers(0, 4), min_size=5, max_size=5))
    first = data.draw(st.integers(0, 4))
    candidates = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=n_minus_1, max_size=n_minus_1),
                                                 min_size=g, max_size=g)), dtype=torch.long).view(g, n_minus_1)
    cand_preds = torch.tensor(next_of)[candidates]  # (g, N-1)
    verdict = verify_greedy(candidates, torch.tensor(first), cand_preds)
    chain = [first]
    while len(chain) < n_minus_1 + 1:
        chain.append(next_of[chain[-1]])
    k = verdict.matched
    assert 1 <= len(verdict.tokens) == k + 1 <= n_minus_1 + 1
    assert verdict.tokens.tolist() == chain[: k + 1]  # exactly greedy's tokens
    if k:  # supplied by a candidate that follows the chain that far
        assert candidates[verdict.best, :k].tolist() == chain[:k]
    else:
        assert verdict.best is None
    assert not any(c[: k + 1] == chain[: k + 1] for c in candidates.tolist()) if k < n_minus_1 else True  # none goes further
