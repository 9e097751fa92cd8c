"""Task 1.2: the n-gram pool (keyed by first token, per-key capacity, most recently added first)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref.sources.ngram_pool import NGramPool

pytestmark = pytest.mark.task1_2


def test_candidates_most_recent_first_and_capacity():
    pool = NGramPool(3, capacity=2)
    pool.add([1, 2, 3])
    pool.add([1, 4, 5])
    assert pool.candidates(1, 5).tolist() == [[4, 5], [2, 3]]
    pool.add([1, 2, 3])  # refresh moves it to the front
    assert pool.candidates(1, 5).tolist() == [[2, 3], [4, 5]]
    pool.add([1, 6, 7])  # full key drops its least recently added n-gram
    assert pool.candidates(1, 5).tolist() == [[6, 7], [2, 3]]
    assert [1, 4, 5] not in pool and [1, 2, 3] in pool
    assert pool.candidates(1, 1).tolist() == [[6, 7]]
    assert len(pool) == 2


def test_unknown_key_gives_empty_candidates():
    empty = NGramPool(4, capacity=3).candidates(9, 3)
    assert empty.shape == (0, 3) and empty.dtype == torch.long


def test_bad_arguments():
    with pytest.raises(ValueError, match="ngram_size"):
        NGramPool(1, 3)
    with pytest.raises(ValueError, match="capacity"):
        NGramPool(3, 0)
    with pytest.raises(ValueError, match="N = 3"):
        NGramPool(3, 2).add([1, 2])


def test_seed_from_prompt_adds_every_ngram():
    pool = NGramPool(3, capacity=4)
    pool.seed_from_tokens([5, 6, 7, 5, 6, 8])
    assert pool.candidates(5, 4).tolist() == [[6, 8], [6, 7]]
    assert pool.candidates(6, 4).tolist() == [[7, 5]]
    assert len(pool) == 4


def test_harvest_reads_columns_of_the_trajectory():
    # window rows are successive Jacobi iterates; column c holds positions p+c .. p+c+N-1
    window = torch.tensor([[1, 2, 3], [4, 5, 6]])  # (N-1, W) = (2, 3)
    new_row = torch.tensor([7, 8, 9])  # (W,)
    pool = NGramPool(3, capacity=2)
    assert pool.harvest(window, new_row) == [(1, 4, 7), (2, 5, 8), (3, 6, 9)]
    assert pool.candidates(2, 2).tolist() == [[5, 8]]


@given(st.integers(2, 4), st.integers(1, 3), st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=40))
def test_pool_properties_after_any_adds(n, capacity, ngrams):
    pool, added = NGramPool(n, capacity), {}
    for ngram in ngrams:
        ngram = ngram[:n]
        pool.add(ngram)
        added.setdefault(ngram[0], set()).add(tuple(ngram[1:]))
        assert pool.candidates(ngram[0], 1).tolist() == [ngram[1:]]  # the newest n-gram comes first
        assert ngram in pool
    for key in range(4):
        found = [tuple(c) for c in pool.candidates(key, capacity + 1).tolist()]
        assert len(found) == min(capacity, len(added.get(key, ())))  # full up to the capacity, never past it
        assert len(set(found)) == len(found) and set(found) <= added.get(key, set())  # distinct, all added
    assert len(pool) == sum(min(capacity, len(v)) for v in added.values())


@given(st.data(), st.integers(2, 4), st.integers(1, 4))
def test_harvest_adds_each_column_as_an_ngram(data, n, w):
    """For any (N-1, W) window and (W,) new row: harvested n-gram c is column c, the window's tokens
    then the new row's, in column order; afterwards each is a candidate of its first token, the
    last one harvested under a key first."""
    cells = st.lists(st.integers(0, 3), min_size=w, max_size=w)
    window = torch.tensor([data.draw(cells) for _ in range(n - 1)], dtype=torch.long)
    new_row = torch.tensor(data.draw(cells), dtype=torch.long)
    pool = NGramPool(n, capacity=w)
    harvested = pool.harvest(window, new_row)
    assert harvested == [(*window[:, c].tolist(), int(new_row[c])) for c in range(w)]
    assert all(type(token) is int for ngram in harvested for token in ngram)
    for ngram in harvested:
        assert list(ngram[1:]) in pool.candidates(ngram[0], w).tolist()
    for key in {ngram[0] for ngram in harvested}:
        newest = [ngram for ngram in harvested if ngram[0] == key][-1]
        assert pool.candidates(key, 1).tolist() == [list(newest[1:])]
