"""Sampling inside a captured step (`ladref.batched.noise.KeyedNoise`, `ladref.batched.sample.KeyedSampler`).

A captured step cannot hold a `torch.Generator`, so its draws are hashes of (seed, step, row,
index). These tests check the hash's uniforms (and that a counter that never moves is caught), the
law of every row of a captured batch against its exact joint law by a chi-square test at ALPHA
with negative controls (as test_batched_sampling.py does for the batch loop), and that the compiled
program draws exactly the tokens the uncompiled one draws.
"""

from __future__ import annotations

import pytest
import torch
from families import peaky_model
from test_batched_sampling import AcceptAlways, NoRenormalisation, NoZeroing, law_p_values, tree_p_values
from test_sampling import ALPHA, chi_square_p

from ladref import CapturedBatchDecoder, JacobiProposer, LookaheadConfig, LookaheadProposer, PromptLookupProposer
from ladref.batched.noise import KeyedNoise, mix32
from ladref.batched.sample import KeyedSampler
from ladref.pricing.cost import CostModel
from ladref.pricing.surface import CostSurface
from ladref.sampling import Warp

pytestmark = pytest.mark.usefixtures("one_thread")


def binned_p(a: torch.Tensor, b: torch.Tensor | None = None, bins: int = 16) -> float:
    """Chi-square p-value that uniforms `a` (or the pairs (a, b)) fill `bins` (bins^2) cells evenly."""
    cells = (a * bins).long() if b is None else (a * bins).long() * bins + (b * bins).long()
    counts = torch.bincount(cells.flatten(), minlength=bins if b is None else bins * bins)
    return chi_square_p(counts, torch.full(counts.shape, 1 / counts.numel(), dtype=torch.float64))


class StuckCounter(KeyedNoise):
    """Biased: the counter never moves, so every step draws the same numbers."""

    def bits(self, rows, width):
        out = super().bits(rows, width)
        self.counter -= 1
        return out


def test_mix32_is_a_bijection_of_32_bits_on_a_sample():
    x = torch.randint(0, 2**32, (200_000,), generator=torch.Generator().manual_seed(0))
    y = mix32(x)
    assert int(y.min()) >= 0 and int(y.max()) < 2**32
    assert torch.unique(x).numel() == torch.unique(y).numel()


@pytest.mark.parametrize("noise, independent", [(KeyedNoise, True), (StuckCounter, False)])
def test_keyed_uniforms_are_uniform_and_independent_across_indices_rows_and_steps(noise, independent):
    draws = noise(12345, "cpu")
    u = torch.stack([draws.uniform(64, 256) for _ in range(8)])  # (steps, rows, width)
    assert float(u.min()) > 0 and float(u.max()) < 1
    one = u[-1]  # one step's draws: (rows, width)
    assert binned_p(one, bins=64) > ALPHA
    assert binned_p(one[:, :-1], one[:, 1:]) > ALPHA  # next index
    assert binned_p(one[:-1], one[1:]) > ALPHA  # next row
    assert (binned_p(u[:-1], u[1:]) > ALPHA) == independent  # next step: the counter's work
    assert not torch.equal(u, torch.stack([KeyedNoise(12346, "cpu").uniform(64, 256) for _ in range(8)]))  # another seed


def test_keyed_noise_refuses_a_seed_outside_32_bits():
    with pytest.raises(ValueError, match="seed"):
        KeyedNoise(2**32, "cpu")


def test_keyed_tree_verification_keeps_each_depths_law():
    assert all(p > ALPHA for p in tree_p_values(KeyedSampler("cpu", generator=torch.Generator().manual_seed(5))))


@pytest.mark.parametrize("rule", [AcceptAlways, NoRenormalisation, NoZeroing])
def test_biased_rules_drawing_keyed_noise_are_rejected(rule):
    class Keyed(rule, KeyedSampler):  # the biased rule over keyed draws
        def draw(self, probs, tokens, drafts):
            return KeyedSampler.race(self, probs) if rule is NoZeroing else super().draw(probs, tokens, drafts)

    assert any(p < ALPHA for p in tree_p_values(Keyed("cpu", generator=torch.Generator().manual_seed(5))))


FREE = {"cost": CostSurface.of(CostModel.from_ratios({1: 1.0, 128: 1.001})), "widths": (1, 3)}  # adaptive, drafting free
CASES = {  # (proposers, the warp's keywords, prompts, the decoder's keywords)
    "plain": ([], {"temperature": 1.3, "top_p": 0.95}, [[0, 7, 0, 4, 0, 5, 7, 0, 2, 0], [3, 1, 3, 6, 1, 3]], {}),
    "jacobi": ([JacobiProposer(2)], {"temperature": 0.7, "top_k": 5}, [[0, 7, 6, 1, 6, 5, 7, 0], [6, 0, 4, 7, 6, 4]], {}),
    "lookahead+lookup": ([LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3)], {"temperature": 0.9},
                         [[0, 7, 0, 4, 0, 7, 0, 4], [6, 0, 4, 7, 6, 4]], {}),
    "adaptive": ([LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3)], {"temperature": 0.9},
                 [[0, 7, 0, 4, 0, 7, 0, 4], [6, 0, 4, 7, 6, 4]], FREE),
}


@pytest.mark.parametrize("name", CASES)
def test_every_row_of_a_captured_sampled_batch_follows_its_law(name):
    proposers, warp, prompts, kwargs = CASES[name]
    k, repeat = 2, 300
    decoder = CapturedBatchDecoder(peaky_model(), proposers, max_length=32, mode=None, steps_per_read=2, **kwargs)
    result = decoder(prompts * repeat, k, eos_token_id=[], do_sample=True, generator=torch.Generator().manual_seed(7), **warp)
    samples = [[row.token_ids for row in result.rows[i :: len(prompts)]] for i in range(len(prompts))]
    if proposers:
        assert sum(r.stats.steps for r in result.rows) < k * len(result.rows)  # some drafts were accepted
    for own, other in law_p_values(prompts, k, Warp(**warp), samples):
        assert own > ALPHA, f"a row's samples deviate from its exact law (p = {own:.2e})"
        assert other < ALPHA  # negative control: the other prompt's law is rejected
    biased = [[s if i % 2 else [0, 0] for i, s in enumerate(rows)] for rows in samples]
    assert all(own < ALPHA for own, _ in law_p_values(prompts, k, Warp(**warp), biased))


def test_a_seeded_captured_batch_is_reproducible_and_its_keywords_are_checked():
    decoder = CapturedBatchDecoder(peaky_model(), [JacobiProposer(3)], max_length=32, mode=None, steps_per_read=3)

    def tokens(seed):
        return decoder([[0, 7, 6, 1], [3, 1, 3]], 8, eos_token_id=[], do_sample=True, temperature=1.5,
                       generator=torch.Generator().manual_seed(seed)).token_ids

    assert tokens(1) == tokens(1) != tokens(2)
    assert decoder([[0, 7, 6, 1]], 3, do_sample=True).rows[0].method == "captured_jacobi"
    with pytest.raises(TypeError, match="unexpected keyword argument 'logits_processor'"):
        decoder([[0, 7, 6, 1]], 3, do_sample=True, logits_processor=[])
    with pytest.raises(ValueError, match="temperature"):
        decoder([[0, 7, 6, 1]], 3, temperature=0.5)  # a sampling keyword without do_sample
    with pytest.raises(TypeError, match="unexpected keyword argument 'attention_mask'"):
        decoder([[0, 7, 6, 1]], 3, attention_mask=None)


@pytest.mark.slow
def test_a_compiled_sampled_step_draws_what_the_uncompiled_one_draws():
    torch._dynamo.reset()
    prompts = [[0, 7, 0, 4, 0, 7], [6, 0, 4, 7, 6, 4], [3, 1, 3]] * 2
    proposers = CASES["lookahead+lookup"][0]
    compiled = CapturedBatchDecoder(peaky_model(), proposers, max_length=64, mode="default", steps_per_read=3)
    plain = CapturedBatchDecoder(peaky_model(), proposers, max_length=64, mode=None, steps_per_read=3)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed in (1, 2):  # a new seed is a new tensor value, not a new program
            options = {"eos_token_id": [0], "do_sample": True, "temperature": 0.8}
            got = compiled(prompts, 12, generator=torch.Generator().manual_seed(seed), **options).token_ids
            assert got == plain(prompts, 12, generator=torch.Generator().manual_seed(seed), **options).token_ids
