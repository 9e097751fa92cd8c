"""Sampling a batch (`ladref.batched.sample`) keeps every row's warped distribution (docs/sampling.md).

As in test_sampling.py, empirical frequencies are compared with exact laws by a chi-square test at
the level ALPHA; every draw is seeded, so each test is deterministic. Many rows of one batch are
independent draws: a batch repeating two prompts gives a few hundred draws of each in one call.
"""

from __future__ import annotations

import random

import pytest
import torch
from families import peaky_model
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampling import ALPHA, PROMPT, chi_square_p, exact_joint, joint_counts
from torch.utils._python_dispatch import TorchDispatchMode

from ladref.batched.drafts import Drafts, ancestor_table, compact, merge
from ladref.batched.loop import decode_batch
from ladref.batched.sample import BatchSampler, race
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.verify import verify_greedy
from ladref.sampling import Warp

pytestmark = pytest.mark.usefixtures("one_thread")

V = 8


def sampled_rows(prompts: list[list[int]], k: int, sampler: BatchSampler, sources=(), repeat: int = 200) -> list[list[list[int]]]:
    """Each prompt's `repeat` samples of k tokens, from one batch holding every prompt `repeat` times, and the batch's result."""
    result = decode_batch(peaky_model(), prompts * repeat, [k] * (len(prompts) * repeat), {"eos_token_id": []}, "sample",
                          list(sources), sampler=sampler)
    return [[row.token_ids for row in result.rows[i :: len(prompts)]] for i in range(len(prompts))], result


def law_p_values(prompts, k, warp, samples) -> list[tuple[float, float]]:
    """Per prompt: (p-value against its own exact law, p-value against the next prompt's)."""
    laws = [exact_joint(peaky_model(), p, k, warp) for p in prompts]
    counts = [joint_counts(s, V, k) for s in samples]
    return [(chi_square_p(c, laws[i]), chi_square_p(c, laws[(i + 1) % len(laws)])) for i, c in enumerate(counts)]


def test_plain_batched_sampling_follows_each_rows_law():
    prompts, k, warp = [PROMPT, [3, 1, 3, 6, 1, 3]], 2, Warp(temperature=1.3, top_p=0.95)
    sampler = BatchSampler("cpu", temperature=1.3, top_p=0.95, generator=torch.Generator().manual_seed(7))
    samples, _ = sampled_rows(prompts, k, sampler)
    for own, other in law_p_values(prompts, k, warp, samples):
        assert own > ALPHA, f"a row's samples deviate from its exact law (p = {own:.2e})"
        assert other < ALPHA  # negative control: the other row's law is rejected
    # a deliberately biased rule: every other draw replaced by [0, 0]
    biased = [[s if i % 2 else [0, 0] for i, s in enumerate(rows)] for rows in samples]
    assert all(own < ALPHA for own, _ in law_p_values(prompts, k, warp, biased))


def test_batched_sampling_with_jacobi_drafts_follows_each_rows_law():
    prompts, k, warp = [[0, 7, 6, 1, 6, 5, 7, 0], [6, 0, 4, 7, 6, 4]], 2, Warp(temperature=0.7, top_k=5)
    sampler = BatchSampler("cpu", temperature=0.7, top_k=5, generator=torch.Generator().manual_seed(11))
    samples, result = sampled_rows(prompts, k, sampler, [BatchJacobi(2)])
    assert sum(r.stats.steps for r in result.rows) < 0.8 * k * len(result.rows)  # drafts were accepted
    for own, other in law_p_values(prompts, k, warp, samples):
        assert own > ALPHA, f"a row's samples deviate from its exact law (p = {own:.2e})"
        assert other < ALPHA


def tree_case(rows: int):
    """`rows` rows drafting [[1, 2], [1, 3], [4, 5], [1, 2], [6, 0]] (merged: 1, 2, 3, 4, 5, 6, 0), every
    other row feeding only [1, 2] and [4, 5] (the rest padding). The laws at the root and at the
    inner nodes give the drafts much of their mass (a biased rule then shows); the leaves' are random.

    Returns:
        (root (B, V), node logits (B, w, V), fed, slot logits (10, V): the logits after each slot's node).
    """
    tokens = torch.tensor([1, 2, 1, 3, 4, 5, 1, 2, 6, 0]).expand(rows, 10)
    parents = torch.tensor([-1, 0, -1, 2, -1, 4, -1, 6, -1, 8])
    drafts = Drafts(tokens, parents, torch.ones(rows, 10, dtype=torch.bool), torch.zeros(10, dtype=torch.long),
                    torch.zeros(rows, 1, dtype=torch.long))
    merged = merge(drafts, ancestor_table(parents.expand(rows, 10), 2))
    some = torch.tensor([True, True, False, False, True, True, False, False, False, False])
    feed = merged.kept & (some | (torch.arange(rows) % 2 == 0)[:, None])
    fed = compact(merged, feed, int(feed.sum(-1).max()))
    slots = torch.randn(10, V, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 1.5
    law = torch.full((4, V), 0.05, dtype=torch.float64)
    law[0, [1, 4, 6]] = torch.tensor([0.35, 0.25, 0.15], dtype=torch.float64)  # the root's
    law[1, [2, 3]] = torch.tensor([0.4, 0.3], dtype=torch.float64)  # after 1
    law[2, 5], law[3, 0] = 0.65, 0.65  # after 4, after 6
    slots[[0, 4, 8]] = law[1:].log()
    return law[0].log().expand(rows, V), slots[fed.node], fed, slots


def tree_p_values(sampler: BatchSampler, rows: int = 6000) -> list[float]:
    """p-values of the first token, of the second after 1 and after 4, and of the third after 1, 2,
    against their exact laws, for the full rows and for the padded ones."""
    root, nodes, fed, slots = tree_case(rows)
    tokens = sampler.verify(root, nodes, fed, 1, 2).tokens
    p = []
    for half in (0, 1):
        t = tokens[half::2]
        p.append(chi_square_p(torch.bincount(t[:, 0], minlength=V), root[0].softmax(-1)))
        for path, slot in (([1], 0), ([4], 4), ([1, 2], 1)):
            after = (t[:, : len(path)] == torch.tensor(path)).all(-1)
            p.append(chi_square_p(torch.bincount(t[after, len(path)], minlength=V), slots[slot].softmax(-1)))
    return p


def test_tree_verification_keeps_each_depths_law():
    p = tree_p_values(BatchSampler("cpu", generator=torch.Generator().manual_seed(5)))
    assert all(x > ALPHA for x in p), p


def test_nothing_fed_draws_one_token():
    drafts = Drafts.of(torch.zeros(4000, 2, dtype=torch.long), torch.tensor([-1, 0]), torch.zeros(4000, 2, dtype=torch.bool))
    merged = merge(drafts, ancestor_table(drafts.parents.expand(4000, 2), 2))
    fed = compact(merged, merged.kept, 0)
    root = torch.randn(V, generator=torch.Generator().manual_seed(1), dtype=torch.float64).expand(4000, V)
    verdict = BatchSampler("cpu", generator=torch.Generator().manual_seed(2)).verify(root, root[:, None][:, :0], fed, 1, 2)
    assert verdict.tokens.shape == (4000, 1) and bool(verdict.count.eq(1).all())
    assert chi_square_p(torch.bincount(verdict.tokens[:, 0], minlength=V), root[0].softmax(-1)) > ALPHA


class AcceptAlways(BatchSampler):
    """Biased: every draft tried is accepted (the first child wins)."""

    def accepts(self, u, q, before):
        return torch.ones_like(q, dtype=torch.bool)


class NoRenormalisation(BatchSampler):
    """Biased: a later sibling is tested against q itself, not the residual's renormalised q."""

    def accepts(self, u, q, before):
        return u < q


class NoZeroing(BatchSampler):
    """Biased: after every draft is rejected, the token is drawn from q with the drafts still in it."""

    def draw(self, probs, tokens, drafts):
        return race(probs, self.generator)


@pytest.mark.parametrize("rule", [AcceptAlways, NoRenormalisation, NoZeroing])
def test_biased_accept_rules_are_rejected(rule):
    p = tree_p_values(rule("cpu", generator=torch.Generator().manual_seed(5)))
    assert any(x < ALPHA for x in p), p


def test_a_seeded_batch_is_reproducible():
    prompts, budgets = [PROMPT, [3, 1, 3]], [6, 6]

    def tokens(seed):
        options = {"do_sample": True, "temperature": 1.5, "generator": torch.Generator().manual_seed(seed)}
        sampler = BatchSampler.from_options(options, "cpu")
        return [r.token_ids for r in decode_batch(peaky_model(), prompts, budgets, {"eos_token_id": []}, "lookahead",
                                                  [BatchJacobi(3)], sampler=sampler).rows]

    assert tokens(1) == tokens(1)
    assert tokens(1) != tokens(2)


@st.composite
def trees(draw, vocab: int = 3, width: int = 8):
    """Drafts of 1-4 rows, each a random tree (siblings may repeat a token) in `width` slots."""
    rng = random.Random(draw(st.integers(0, 10_000)))
    rows = rng.randint(1, 4)
    tokens, parents = torch.zeros(rows, width, dtype=torch.long), torch.full((rows, width), -1, dtype=torch.long)
    valid = torch.zeros(rows, width, dtype=torch.bool)
    for b in range(rows):
        size = rng.randint(0, width)
        for i in range(size):
            tokens[b, i], parents[b, i] = rng.randrange(vocab), rng.choice([-1, *range(i)]) if i else -1
        valid[b, :size] = True
    return Drafts(tokens, parents, valid, torch.zeros(width, dtype=torch.long), torch.zeros(rows, 1, dtype=torch.long))


@settings(max_examples=25, deadline=None)
@given(trees(), st.integers(0, 10_000))
def test_near_zero_temperature_verifies_as_greedy(drafts, seed):
    merged = merge(drafts, ancestor_table(drafts.parents, 8))
    fed = compact(merged, merged.kept, int(merged.kept.sum(-1).max()))
    generator = torch.Generator().manual_seed(seed)
    root = torch.randn(fed.node.shape[0], 3, generator=generator, dtype=torch.float64)
    nodes = torch.randn(*fed.node.shape, 3, generator=generator, dtype=torch.float64)
    sampled = BatchSampler("cpu", temperature=1e-7, generator=generator).verify(root, nodes, fed, 1, 8)
    greedy = verify_greedy(root.argmax(-1), nodes.argmax(-1), fed, 1, 8)
    assert torch.equal(sampled.count, greedy.count) and torch.equal(sampled.path, greedy.path)
    for got, want, count in zip(sampled.tokens, greedy.tokens, greedy.count):
        assert got[:count].tolist() == want[:count].tolist()


class OpCount(TorchDispatchMode):
    """Every aten op dispatched, by name."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_verify_makes_no_reads_and_as_many_ops_for_any_batch():
    counts = []
    for rows in (2, 16):  # every other row padded
        root, nodes, fed, _ = tree_case(rows)
        sampler = BatchSampler("cpu", temperature=0.9, top_k=6, top_p=0.9, generator=torch.Generator().manual_seed(0))
        with OpCount() as mode:
            sampler.verify(root, nodes, fed, 1, 2)
            sampler.sample(root)
        assert not {"_local_scalar_dense.default", "nonzero.default", "item.default"} & set(mode.ops), mode.ops
        counts.append(len(mode.ops))
    assert counts[0] == counts[1]


def test_options_are_checked():
    assert BatchSampler.from_options({}, "cpu") is None
    assert BatchSampler.from_options({"do_sample": False}, "cpu") is None
    assert isinstance(BatchSampler.from_options({"do_sample": True, "top_k": 3}, "cpu"), BatchSampler)
    with pytest.raises(ValueError, match="do_sample=True"):
        BatchSampler.from_options({"temperature": 0.5}, "cpu")
    with pytest.raises(ValueError, match="do_sample=False"):
        BatchSampler("cpu", do_sample=False)
    with pytest.raises(ValueError, match="temperature"):
        BatchSampler("cpu", temperature=0.0)
    with pytest.raises(TypeError, match="generator"):
        BatchSampler("cpu", generator=3)
