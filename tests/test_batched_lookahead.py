"""The batched lookahead window and n-gram pool: every row's pool is `NGramPool`'s, every row's decode `lookahead_decode`'s."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, lookahead_configs, prompts, seeds, tiny_model, vocab_sizes

from ladref import LookaheadConfig, greedy_decode, lookahead_decode
from ladref.batched.loop import decode_batch
from ladref.batched.sources.lookahead import BatchLookahead
from ladref.batched.sources.pool import BatchPool
from ladref.sources.ngram_pool import NGramPool

pytestmark = pytest.mark.usefixtures("one_thread")


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000))
def test_adding_ngrams_at_once_leaves_each_rows_pool_as_adding_them_one_by_one(seed):
    rng = random.Random(seed)
    rows, vocab, n, capacity = rng.randint(1, 3), rng.randint(1, 4), rng.randint(2, 4), rng.randint(1, 4)
    pool, reference = BatchPool(rows, vocab, n, capacity, torch.device("cpu")), [NGramPool(n, capacity) for _ in range(rows)]
    for _ in range(rng.randint(1, 5)):  # rounds of m adds each, repeated keys and n-grams within a round
        m = rng.randint(1, 10)
        grams = torch.randint(0, vocab, (rows, m, n), generator=torch.Generator().manual_seed(rng.randrange(10**6)))
        valid = torch.rand(rows, m, generator=torch.Generator().manual_seed(rng.randrange(10**6))) < 0.8
        add = pool.merge if rng.random() < 0.5 else pool.add  # by sorting, or pair by pair: either, in any order
        add(grams[..., 0], grams[..., 1:], valid)
        for b in range(rows):
            reference[b].add_all(g for g, ok in zip(grams[b].tolist(), valid[b].tolist()) if ok)
    for b in range(rows):
        for key in range(vocab):
            tokens, found = pool.candidates(torch.full((rows,), key), capacity)
            assert tokens[b][found[b]].tolist() == reference[b].candidates(key, capacity).tolist()


def test_seeding_adds_every_prompt_ngram_in_order():
    text = torch.tensor([[1, 2, 1, 2, 1, 3, 0, 0], [4, 4, 4, 4, 5, 4, 4, 0]])
    length = torch.tensor([6, 7])
    pool = BatchPool(2, 6, 3, 2, torch.device("cpu"))
    pool.seed(text, length)
    for b in range(2):
        reference = NGramPool(3, 2)
        reference.seed_from_tokens(text[b, : length[b]].tolist())
        for key in range(6):
            tokens, found = pool.candidates(torch.full((2,), key), 2)
            assert tokens[b][found[b]].tolist() == reference.candidates(key, 2).tolist()


@settings(max_examples=12, deadline=None)
@given(architectures, vocab_sizes, seeds, lookahead_configs(), st.data())
def test_each_row_decodes_as_lookahead_decode_does(arch, vocab, seed, config, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 16), min_size=len(batch), max_size=len(batch)))
    eos = data.draw(st.sampled_from([[], [0], [vocab - 1]]))
    result = decode_batch(model, batch, budgets, {"eos_token_id": eos}, "lookahead", [BatchLookahead(config, vocab)])
    for prompt, budget, row in zip(batch, budgets, result):
        one = lookahead_decode(model, prompt, budget, config=config, eos_token_id=eos)
        assert row.token_ids == one.token_ids == greedy_decode(model, prompt, budget, eos_token_id=eos).token_ids
        for field in ("accepted_per_step", "forward_tokens_per_step", "window_tokens_per_step", "accepted_by_source"):
            assert getattr(row.stats, field) == getattr(one.stats, field)


class FirstRowsWindow:
    """Every node, and the window for row 0 only (a choice, `ladref.batched.source.BatchChoice`)."""

    def choose(self, merged, state, window_cells, kv):
        return merged.kept, state.rows == 0

    def observe(self, state, outcome):
        pass

    def select(self, keep):
        pass


def test_a_row_that_does_not_feed_its_window_leaves_the_others_as_they_would_be():
    model, config = tiny_model("llama", 16, 0), LookaheadConfig(2, 3, 2)
    batch = [[1, 2, 3, 4, 1, 2], [5, 6, 5, 6]]
    result = decode_batch(model, batch, [12, 12], {"eos_token_id": []}, "lookahead", [BatchLookahead(config, 16)], FirstRowsWindow())
    one = lookahead_decode(model, batch[0], 12, config=config, eos_token_id=[])
    assert result.token_ids == [greedy_decode(model, p, 12, eos_token_id=[]).token_ids for p in batch]
    assert result[0].stats.accepted_per_step == one.stats.accepted_per_step  # row 0's window and pool ran as alone
    assert set(result[0].stats.window_tokens_per_step) == {3} and set(result[1].stats.window_tokens_per_step) == {0}
