"""Independent naive models of the mask, the tree verifier and the pool, checked against the library.

These oracles spell out the rules one token or one n-gram at a time. They are not marked with a
course task, so student copies do not ship them (assignments/make_student.py ships only the
task-marked tests): a naive model of a task function would be a solution.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from ladref import DraftTree
from ladref.masks import StepLayout
from ladref.sources.ngram_pool import NGramPool
from ladref.verify import verify_greedy

paths = st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=4), max_size=6)
layouts = st.builds(StepLayout, st.integers(0, 8), st.integers(2, 6), paths.map(lambda p: DraftTree.from_paths(p, "s")))


def naive_sequence(layout: StepLayout, i: int) -> list[int]:
    """The flat indices of the sequence token i extends, from the rules, one token at a time."""
    W, L = layout.window_size, layout.lookahead_len
    if i < L:  # lookahead cell (r, c): row 0 up to column c, then column c down to row r
        if W == 0:
            return [0]
        r, c = divmod(i, W)
        return [col for col in range(c + 1)] + [row * W + c for row in range(1, r + 1)]
    node, chain = i - L, []  # a tree node: the current token, then its ancestors from the root down, then itself
    while node >= 0:
        chain.append(L + node)
        node = int(layout.tree.parents[node])
    return [0] + chain[::-1]


def naive_allowed(layout: StepLayout) -> torch.Tensor:
    allowed = torch.zeros(layout.length, layout.length, dtype=torch.bool)
    for i in range(layout.length):
        allowed[i, naive_sequence(layout, i)] = True
    return allowed


@given(layouts)
def test_mask_equals_naive_model(layout):
    assert torch.equal(layout.allowed(), naive_allowed(layout))


@given(st.data(), paths)
def test_tree_verification_equals_the_longest_greedy_draft(data, drafts):
    # a fixed "model": the argmax after token t is next_of[t]; greedy from y_1 is the chain
    next_of = data.draw(st.lists(st.integers(0, 4), min_size=5, max_size=5))
    first = data.draw(st.integers(0, 4))
    tree = DraftTree.from_paths(drafts, "s")
    chain = [first]
    while len(chain) < 6:
        chain.append(next_of[chain[-1]])
    longest = max([0] + [next((j for j in range(len(p)) if p[j] != chain[j]), len(p)) for p in drafts])
    verdict = verify_greedy(tree, first, torch.tensor(next_of)[tree.tokens])
    assert verdict.matched == longest and verdict.tokens.tolist() == chain[: longest + 1]


@given(st.integers(2, 4), st.integers(1, 3), st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), max_size=40))
def test_pool_matches_a_naive_lru_model(n, capacity, ngrams):
    pool, naive = NGramPool(n, capacity), {}
    for ngram in ngrams:
        ngram = ngram[:n]
        pool.add(ngram)
        entries = [e for e in naive.get(ngram[0], []) if e != tuple(ngram[1:])]
        naive[ngram[0]] = ([tuple(ngram[1:])] + entries)[:capacity]
    for key in range(4):
        assert [tuple(c) for c in pool.candidates(key, capacity).tolist()] == naive.get(key, [])
    assert len(pool) == sum(len(v) for v in naive.values())
