"""Adaptive decoding on a batch: each row chooses what the one-prompt policy chooses, all rows at once."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import tiny_model

from ladref import DraftTree, greedy_decode
from ladref.batched.drafts import Drafts, Merged, ancestor_table, merge
from ladref.batched.loop import decode_batch
from ladref.batched.policy import BatchPolicy
from ladref.batched.prices import worth
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.state import BatchState
from oracle_policy import DraftPolicy, Load

from ladref.pricing.policy import PolicySettings
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")
NAMES = ("prompt_lookup", "lookahead", "recycling")


def random_trie(rng: random.Random, size: int, vocab: int, name: str) -> DraftTree:
    """A random trie of about `size` nodes (paths drawn at random, shared prefixes merged)."""
    return DraftTree.from_paths([[rng.randrange(vocab) for _ in range(rng.randint(1, 4))] for _ in range(size)], name)


def as_drafts(trees: list[DraftTree], width: int, evidence: list[int]) -> Drafts:
    """One source's trees, a row each, in `width` slots."""
    tokens, parents = torch.zeros(len(trees), width, dtype=torch.long), torch.full((len(trees), width), -1, dtype=torch.long)
    valid = torch.zeros(len(trees), width, dtype=torch.bool)
    for b, tree in enumerate(trees):
        n = len(tree)
        tokens[b, :n], parents[b, :n], valid[b, :n] = tree.tokens, tree.parents, True
    return Drafts.of(tokens, parents, valid, torch.tensor(evidence), trie=True)


def random_batch(rng: random.Random, rows: int, size: int) -> tuple[list, list, Drafts, Merged, BatchState]:
    """`rows` rows of proposals, a random trie of up to `size` paths and an evidence grade per source each:
    (trees by row and source, evidence likewise, their `Drafts`, merged, the rows' fresh state)."""
    trees = [[random_trie(rng, rng.randint(0, size), 4, name) for name in NAMES] for _ in range(rows)]
    evidence = [[rng.randint(0, 3) for _ in NAMES] for _ in range(rows)]
    drafts = Drafts.cat([as_drafts([t[s] for t in trees], 24, [e[s] for e in evidence]) for s in range(len(NAMES))])
    state = BatchState.start([torch.tensor([1, 2])] * rows, [8] * rows, frozenset(), 5, torch.device("cpu"))
    return trees, evidence, drafts, merge(drafts, ancestor_table(drafts.parents, 4)), state


def paths(tree: DraftTree) -> set[tuple[int, ...]]:
    return {tuple(tree.path_tokens(i)) for i in range(len(tree))}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([CostSurface.roofline(0.015, 0.004), CostSurface.roofline(0.01, 0.00002)]))
def test_a_fresh_rows_choice_is_the_one_prompt_policys(seed, surface):
    rng = random.Random(seed)
    rows, cells = rng.randint(1, 4), rng.choice([None, 3, 8])
    trees, evidence, drafts, merged, state = random_batch(rng, rows, 6)
    policy = BatchPolicy(surface, rows, NAMES, 4)
    feed, window = policy.choose(merged, state, cells, kv=128)
    for b in range(rows):
        alone = DraftPolicy(surface.at(rows), None, PolicySettings()).choose(trees[b], 128, cells, evidence[b], Load(rows - 1.0, 1))
        fed = feed[b].nonzero().flatten().tolist()  # each fed node's path: its ancestors' tokens, by depth
        fed_paths = {tuple(int(drafts.tokens[b, j]) for j in sorted(merged.ancestors[b, i].nonzero().flatten().tolist(),
                                                                    key=lambda j: int(merged.depth[b, j]))) for i in fed}
        assert len(fed) == len(alone.tree) and fed_paths == paths(alone.tree)
        assert bool(window[b]) == alone.window


@pytest.mark.parametrize("surface, drafts", [(CostSurface.roofline(0.015, 0.004), False), (CostSurface.roofline(0.01, 0.00002), True)])
def test_a_batch_drafts_where_the_surface_pays_for_it_and_stays_exact(surface, drafts):
    model = tiny_model("llama", 16, 0)  # its greedy texts cycle: Jacobi's guesses converge
    batch = [[1, 2, 3], [4, 5], [7, 1], [9], [2, 2, 8], [11, 3]]
    policy = BatchPolicy(surface, len(batch), ["jacobi"], 4)
    result = decode_batch(model, batch, 30, {"eos_token_id": []}, "adaptive", [BatchJacobi(4)], policy)
    assert result.token_ids == [greedy_decode(model, p, 30, eos_token_id=[]).token_ids for p in batch]
    fed = sum(sum(row.stats.draft_tokens_per_step) for row in result)
    assert (fed > 10 * len(batch)) if drafts else fed == 0


@pytest.mark.parametrize("captured", [False, True])
def test_a_batchs_policy_judges_its_proposals_as_the_texts_grow(captured):
    """A step's proposals are judged once the texts reach them, and the acceptance tables move from their
    prior. (Its `seen` once aliased the state's lengths, which every commit moves in place: then no
    node was ever judged, and every choice was the prior's.)"""
    from ladref import CapturedBatchDecoder, JacobiProposer
    from ladref.pricing.cost import CostModel

    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3], [4, 5], [7, 1]]  # its greedy texts cycle: Jacobi's guesses converge
    surface = CostSurface.of(CostModel.from_ratios({1: 1.0, 128: 1.001}))  # drafting free: every step drafts
    if captured:
        decoder = CapturedBatchDecoder(model, [JacobiProposer(4)], max_length=96, mode=None, cost=surface, widths=(2,))
        result, policy = decoder(batch, 30, eos_token_id=[]), decoder.policy
    else:
        policy = BatchPolicy(surface, len(batch), ["jacobi"], 4)
        result = decode_batch(model, batch, 30, {"eos_token_id": []}, "adaptive", [BatchJacobi(4)], policy)
    accepted = sum(n * k for row in result for k, n in row.stats.accepted_by_source["jacobi"].items())
    acceptance, prior = policy.acceptance, BatchPolicy(surface, len(batch), ["jacobi"], 4).acceptance
    assert accepted > 10 and float(acceptance.reached.mean()) > float(prior.reached.mean())  # judged (a row each, finished rows gone): reached and ...
    assert float(acceptance.accepted.mean()) > float(prior.accepted.mean())  # ... right nodes counted
    assert float(acceptance.matched.mean()) > float(prior.matched.mean())  # the probes' tally too


def test_worth_is_the_most_b_nodes_can_be_worth():
    """`worth` against every way of spreading b nodes over the depths: a node d deep worth at most the
    product of the first d levels, one depth's nodes at most 1 together."""
    import itertools

    rng = random.Random(0)
    for _ in range(200):
        levels = [rng.choice([0.0, 0.05, 0.2, 1 / 3, 0.5, 0.9, 1.0]) for _ in range(rng.randint(1, 4))]
        most = rng.randint(0, 7)
        reach = [math.prod(levels[: d + 1]) for d in range(len(levels))]
        brute = [max(sum(min(1.0, n * r) for n, r in zip(split, reach))
                     for split in itertools.product(range(b + 1), repeat=len(levels)) if sum(split) == b) for b in range(most + 1)]
        assert worth(levels, most) == pytest.approx(brute)


def test_where_the_learned_rates_say_no_draft_pays_the_choice_feeds_none():
    """`may_draft` on the rates a batch learned (its `hope`) is a bound: where it says no, `choose`
    feeds no node and no window in any row, whatever was proposed; and it says no where a whole token
    a node would say yes."""
    rng, closed = random.Random(1), 0
    for _ in range(150):
        rows, cells = rng.randint(1, 4), rng.choice([None, 3, 8])
        surface = CostSurface.roofline(0.01, rng.choice([0.004, 0.0015, 0.0006]))
        _, _, _, merged, state = random_batch(rng, rows, 8)
        policy = BatchPolicy(surface, rows, NAMES, 4)
        a = policy.acceptance
        draw = torch.Generator().manual_seed(rng.randrange(10**6))
        seen = torch.randint(0, 60, a.reached.shape, generator=draw).double()
        a.reached += seen
        a.accepted += (seen * rng.uniform(0.0, 0.8) * torch.rand(seen.shape, generator=draw)).floor()  # low rates, often
        a.matched.uniform_(0.5, 3.0), a.window_value.uniform_(0.0, 1.0)
        hope = policy.hope(state).tolist()
        trust, bonus, levels = BatchPolicy.heard(hope)
        kv = surface.kv_lengths[0]
        if policy.prices.may_draft(rows, kv, cells, trust, bonus, levels):
            continue
        closed += policy.prices.may_draft(rows, kv, cells, trust, bonus)  # only the learned rates closed it
        feed, window = policy.choose(merged, state, cells, kv)
        assert not feed.any() and not window.any()
    assert closed > 10
