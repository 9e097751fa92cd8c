"""Sampled lookahead decoding keeps the model's warped distribution (docs/sampling.md).

The statistical tests compare empirical frequencies with the *exact* distribution of the first
tokens, enumerated from the model, by a chi-square goodness-of-fit test. Every draw comes from a
seeded `torch.Generator`, so each test is deterministic; the significance level 1e-3 only says how
unlucky a correct implementation would have to be for the fixed seed to fail.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from families import peaky_model
from strategies import tiny_model
from transformers import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from ladref import DraftTree, LookaheadConfig, PromptLookupProposer, RecyclingProposer, TreeTemplate, greedy_decode, lookahead_decode
from ladref.batched.sample import BatchSampler
from ladref.sampling import SamplingChooser, Warp, make_chooser
from ladref.decoders.sample import sample_decode
from ladref.verify import verify_chosen

PROMPT = [0, 7, 0, 4, 0, 5, 7, 0, 2, 0]  # token 0 has four pool n-grams with distinct next tokens
ALPHA = 1e-3


pytestmark = pytest.mark.usefixtures("one_thread")


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of a chi-square goodness-of-fit test, cells with expected count < 5 pooled."""
    n = counts.sum()
    expected = probs.double() * n
    small = expected < 5
    obs = torch.cat([counts[~small].double(), counts[small].double().sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    stat = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    df = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


def exact_joint(model: torch.nn.Module, prompt: list[int], k: int, warp: Warp) -> torch.Tensor:
    """(V**k,) exact probability of each k-token continuation under warped ordinary sampling."""
    V = model.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=k)))  # lexicographic order
    ids = torch.cat([torch.tensor(prompt).expand(len(seqs), -1), seqs], dim=1)
    with torch.no_grad():
        logits = model(ids).logits[:, len(prompt) - 1 : -1]  # (V**k, k, V)
    logp = warp(logits.double()).log_softmax(-1).gather(-1, seqs[..., None])[..., 0].sum(-1)
    return logp.exp()


def joint_counts(samples: list[list[int]], V: int, k: int) -> torch.Tensor:
    index = torch.tensor([sum(t * V ** (k - 1 - i) for i, t in enumerate(s[:k])) for s in samples])
    return torch.bincount(index, minlength=V**k)


def test_chi_square_helper_detects_a_wrong_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2])
    assert chi_square_p(torch.tensor([500, 300, 200]), probs) > 0.99
    assert chi_square_p(torch.tensor([400, 350, 250]), probs) < ALPHA


@pytest.mark.parametrize(
    "warp, config",
    [
        (Warp(), LookaheadConfig(window_size=2, ngram_size=3, max_candidates=4)),
        (Warp(temperature=0.7, top_k=5, top_p=0.9), LookaheadConfig(window_size=3, ngram_size=4, max_candidates=3)),
    ],
    ids=["plain", "warped"],
)
def test_lookahead_sampling_matches_exact_distribution(warp, config, one_thread):
    model, k, draws = peaky_model(), 2, 600
    generator = torch.Generator().manual_seed(1234)
    samples, steps = [], 0
    for _ in range(draws):
        result = lookahead_decode(model, PROMPT, k, config=config, do_sample=True, temperature=warp.temperature,
                                  top_k=warp.top_k, top_p=warp.top_p, generator=generator)
        samples.append(result.token_ids)
        steps += result.stats.steps
    assert steps < 0.8 * draws * k  # drafts were accepted: the verification path was exercised
    p = chi_square_p(joint_counts(samples, 8, k), exact_joint(model, PROMPT, k, warp))
    assert p > ALPHA, f"lookahead samples deviate from the exact distribution (p = {p:.2e})"


def test_plain_sampler_matches_exact_distribution(one_thread):
    model, k, warp = peaky_model(), 2, Warp(temperature=1.3, top_p=0.95)
    generator = torch.Generator().manual_seed(7)
    samples = [sample_decode(model, PROMPT, k, temperature=1.3, top_p=0.95, generator=generator).token_ids for _ in range(400)]
    assert chi_square_p(joint_counts(samples, 8, k), exact_joint(model, PROMPT, k, warp)) > ALPHA


def _tree_case():
    """Five drafts sharing prefixes, merged into a trie, with fixed random logits per node."""
    tree = DraftTree.from_paths([[1, 2], [1, 3], [4, 5], [1, 2], [6, 0]], "s")  # nodes 1, 2, 3, 4, 5, 6, 0
    generator = torch.Generator().manual_seed(3)
    first = torch.randn(8, generator=generator, dtype=torch.float64) * 1.5
    node_logits = torch.randn(len(tree), 8, generator=generator, dtype=torch.float64) * 1.5
    return tree, first, node_logits


def _second_counts(chooser, draws: int) -> tuple[torch.Tensor, torch.Tensor]:
    """First-token counts, and second-token counts after token 1 (drafts 2 and 3 compete there)."""
    tree, first, node_logits = _tree_case()
    firsts, seconds = torch.zeros(8, dtype=torch.long), torch.zeros(8, dtype=torch.long)
    for _ in range(draws):
        tokens = verify_chosen(tree, first, node_logits, chooser.choose, [0]).tokens.tolist()
        firsts[tokens[0]] += 1
        if tokens[0] == 1:
            seconds[tokens[1]] += 1
    return firsts, seconds


def test_tree_verification_keeps_distribution_at_each_depth():
    chooser = SamplingChooser(Warp(), torch.Generator().manual_seed(11))
    firsts, seconds = _second_counts(chooser, 6000)
    tree, first, node_logits = _tree_case()
    assert chi_square_p(firsts, first.softmax(-1)) > ALPHA
    assert chi_square_p(seconds, node_logits[0].softmax(-1)) > ALPHA  # node 0 is token 1


class NoRenormalisation(SamplingChooser):
    """A plausible bug: test later drafts against p itself instead of the renormalised residual."""

    def choose(self, context, logits, proposals):
        p = self.probs(context, logits)
        for token in dict.fromkeys(int(t) for t in proposals):
            if torch.rand((), dtype=torch.float64, generator=self.generator) < p[token]:
                return token
        rest = p.clone()
        rest[list(proposals)] = 0
        return int(torch.multinomial(rest / rest.sum(), 1, generator=self.generator))


def test_statistical_test_catches_missing_renormalisation():
    firsts, _ = _second_counts(NoRenormalisation(Warp(), torch.Generator().manual_seed(11)), 6000)
    _, first, _ = _tree_case()
    assert chi_square_p(firsts, first.softmax(-1)) < ALPHA


def test_warp_equals_transformers_processors():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    logits[0, :5] = logits[0, 5]  # ties at the k-th logit
    for t, k, p in [(0.5, 5, 0.8), (1.0, None, 0.3), (2.0, 7, None), (1.0, 60, 1.0), (0.9, 1, 0.99)]:
        hf = LogitsProcessorList([TemperatureLogitsWarper(t)] + ([TopKLogitsWarper(k)] if k else [])
                                 + ([TopPLogitsWarper(p)] if p and p < 1 else []))
        assert torch.equal(Warp(t, k, p)(logits), hf(None, logits))


@pytest.mark.parametrize("arch, seed", [("llama", 0), ("qwen2", 1), ("gpt2", 2)])
def test_temperature_to_zero_is_greedy(arch, seed):
    model = tiny_model(arch, 16, seed)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 3, 1, 4, 1]
    greedy = greedy_decode(model, prompt, 24).token_ids
    sampled = lookahead_decode(model, prompt, 24, config=LookaheadConfig(3, 3, 3), do_sample=True, temperature=1e-7,
                               generator=torch.Generator().manual_seed(seed))
    assert sampled.token_ids == greedy


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    model, config = peaky_model(), LookaheadConfig(3, 4, 4)

    def run(seed: int) -> list[int]:
        return lookahead_decode(model, PROMPT, 24, config=config, do_sample=True, generator=torch.Generator().manual_seed(seed)).token_ids

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_sampling_arguments_are_validated():
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        make_chooser(True, temperature=0.0)
    with pytest.raises(ValueError, match="top_k must be None or an int >= 1"):
        make_chooser(True, top_k=0)
    with pytest.raises(ValueError, match=r"top_p must be None or a number in \(0, 1\]"):
        make_chooser(True, top_p=1.5)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        make_chooser(True, generator=42)
    with pytest.raises(ValueError, match="only apply when sampling; pass do_sample=True"):
        lookahead_decode(peaky_model(), PROMPT, temperature=0.5)
    with pytest.raises(TypeError, match="do_sample must be a bool"):
        make_chooser("yes")


def test_sampling_chooser_draws_as_the_accept_rule_with_a_point_mass():
    """`SamplingChooser.choose` with distinct drafts t_1, t_2, .. is `ladref.accept.accept_one` with
    q = point_mass(t_1), draw for draw (a uniform, then a multinomial on rejection), however many
    drafts follow t_1 (one draft, a repeated one, several distinct ones), and with none it is
    `accept_several` with no draft (one multinomial from p): the same generator state gives the same
    token and leaves the generators in the same state. Changing either rule alone breaks this."""
    from ladref.accept import accept_one, accept_several, point_mass

    cases = torch.Generator().manual_seed(3)
    for i in range(500):
        V = int(torch.randint(2, 12, (), generator=cases))
        logits = torch.randn(V, dtype=torch.float64, generator=cases) * 3
        warp = Warp(top_k=int(torch.randint(1, V + 1, (), generator=cases)))  # some drafts have p(d) = 0
        d, *others = torch.randperm(V, generator=cases)[:int(torch.randint(2, V + 1, (), generator=cases))].tolist()
        # a repeated draft is tried once; several distinct drafts: one round against the first
        proposals = [[], [d], [d, d], [d, *others], [d, others[0], d, *others]][i % 5]
        ours, theirs = torch.Generator().manual_seed(i), torch.Generator().manual_seed(i)
        p = SamplingChooser(warp).probs([], logits)
        token = SamplingChooser(warp, ours).choose([], logits, proposals)
        expected = accept_one(p, point_mass(d, V), d, theirs)[0] if proposals else accept_several(p, p, [], theirs)[0]
        assert token == expected, (i, p, proposals)
        assert torch.equal(torch.rand(2, generator=ours), torch.rand(2, generator=theirs)), i  # the same draws made


FIRST_P = torch.tensor([0.05, 0.2, 0.05, 0.15, 0.05, 0.3, 0.1, 0.1], dtype=torch.float64)  # p at the root
SIBLINGS = [5, 1, 3]  # three distinct drafts at the root, tried in this order: p(t_i) = 0.3, 0.2, 0.15


class FirstDraftTwice(SamplingChooser):
    """Biased: the first draft is accepted with probability min(1, 2 p(t_1)), else the token is
    drawn from p with t_1 removed (no draft: from p)."""

    def choose(self, context, logits, proposals):
        p = self.probs(context, logits)
        if not proposals:
            return int(torch.multinomial(p, 1, generator=self.generator))
        first = int(proposals[0])
        if torch.rand((), dtype=torch.float64, generator=self.generator) < min(1.0, 2 * float(p[first])):
            return first
        rest = p.clone()
        rest[first] = 0
        return int(torch.multinomial(rest / rest.sum(), 1, generator=self.generator))


def _root_choices(chooser, draws: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Over `draws` tree walks from a root whose children are `SIBLINGS`: counts of the first token
    emitted (V,) and of the draft accepted (k + 1,: the index of the accepted sibling, k for none)."""
    tree = DraftTree.from_paths([[t] for t in SIBLINGS], "s")
    node_logits = torch.zeros(len(tree), len(FIRST_P), dtype=torch.float64)
    tokens, accepted = torch.zeros(len(FIRST_P), dtype=torch.long), torch.zeros(len(SIBLINGS) + 1, dtype=torch.long)
    for _ in range(draws):
        verdict = verify_chosen(tree, FIRST_P.log(), node_logits, chooser.choose, [0])
        tokens[int(verdict.tokens[0])] += 1
        accepted[verdict.path[0] if verdict.path else len(SIBLINGS)] += 1
    return tokens, accepted


def test_several_drafts_accepted_with_their_own_probability_through_the_walk():
    """With k = 3 distinct drafts at a node, the token emitted is ~ p and draft t_i is the one the
    walk accepts with probability p(t_i) (none: 1 - sum_i p(t_i)), as under the multi-round rule;
    a rule biased toward the first draft fails both tests."""
    p = FIRST_P
    which = torch.cat([p[SIBLINGS], 1 - p[SIBLINGS].sum()[None]])
    tokens, accepted = _root_choices(SamplingChooser(Warp(), torch.Generator().manual_seed(17)), 4000)
    assert accepted[:-1].sum() > 2000  # drafts were accepted: the walk descended
    assert chi_square_p(tokens, p) > ALPHA
    assert chi_square_p(accepted, which) > ALPHA
    tokens, accepted = _root_choices(FirstDraftTwice(Warp(), torch.Generator().manual_seed(17)), 4000)
    assert chi_square_p(tokens, p) < ALPHA
    assert chi_square_p(accepted, which) < ALPHA


def test_tree_walk_with_argmax_equals_greedy_verification():
    from ladref.sampling import GreedyChooser
    from ladref.verify import verify_greedy

    generator = torch.Generator().manual_seed(5)
    for _ in range(300):
        g, n, V = int(torch.randint(0, 5, (), generator=generator)), int(torch.randint(1, 4, (), generator=generator)), 3
        tree = DraftTree.from_paths(torch.randint(0, V, (g, n), generator=generator).tolist(), "s")
        first, node_logits = torch.randn(V, generator=generator), torch.randn(len(tree), V, generator=generator)
        greedy = verify_greedy(tree, int(first.argmax()), node_logits.argmax(-1))
        walked = verify_chosen(tree, first, node_logits, GreedyChooser().choose, [0])
        assert walked.tokens.tolist() == greedy.tokens.tolist() and walked.path == greedy.path


def _sampled_with(prompt, proposer_factory, chooser_factory, draws: int, k: int = 2) -> tuple[torch.Tensor, int]:
    """Joint counts of k-token samples through the tree loop, and the drafted tokens accepted."""
    from ladref.call import TokenSink
    from ladref.results import DecodeStats
    from ladref.runner import ModelRunner
    from ladref.step import run_drafting

    model, samples, accepted = peaky_model(), [], 0
    proposer, chooser = proposer_factory(), chooser_factory()  # one proposer for all draws: a warm one keeps learning
    for _ in range(draws):
        sink, stats = TokenSink(k, frozenset()), DecodeStats()
        run_drafting(ModelRunner(model), torch.tensor(prompt), [proposer], sink, stats, chooser)
        samples.append(sink.tokens)
        accepted += stats.new_tokens - stats.steps
    return joint_counts(samples, 8, k), accepted


DRAFT_SOURCES = {  # (prompt, proposer factory)
    # warm: the adjacency learned on earlier draws drafts from the first step on (each draw is still exact)
    "recycling": (PROMPT, lambda: RecyclingProposer(8, TreeTemplate.best_first(12, 3, 3), warm=True)),
    # the last token 0 occurred four times before: four drafts, the most recent (7, 5, ...) first
    "prompt_lookup": ([0, 4, 0, 0, 5, 0, 7, 2, 0], lambda: PromptLookupProposer(draft_len=2, max_ngram=2, max_matches=4)),
}


@pytest.mark.parametrize("source", DRAFT_SOURCES)
def test_tree_sampling_matches_exact_distribution(source):
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    prompt, proposer = DRAFT_SOURCES[source]
    counts, accepted = _sampled_with(prompt, proposer, lambda: SamplingChooser(warp, generator), 600)
    assert accepted > 100  # drafts were accepted: the tree walk was exercised
    p = chi_square_p(counts, exact_joint(peaky_model(), prompt, 2, warp))
    assert p > ALPHA, f"{source} samples deviate from the exact distribution (p = {p:.2e})"


@pytest.mark.parametrize("source", DRAFT_SOURCES)
def test_tree_sampling_test_rejects_a_wrong_accept_rule(source):
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    prompt, proposer = DRAFT_SOURCES[source]
    counts, _ = _sampled_with(prompt, proposer, lambda: NoRenormalisation(warp, generator), 600)
    assert chi_square_p(counts, exact_joint(peaky_model(), prompt, 2, warp)) < ALPHA


def _sampled_adaptively(static: bool, sampler_factory, draws: int, k: int = 2) -> tuple[torch.Tensor, int]:
    """Joint counts of k-token samples through adaptive decoding's loop (the engine, a batch of one,
    as `adaptive_decode` runs it), and the drafted tokens accepted.

    A flat cost curve makes the policy feed every proposed node. ``static``: through a
    `StaticRunner` of a few widths, as `ladref.CompiledAdaptiveDecoder` runs it (here not
    compiled: the same padded steps), one runner for all draws as there."""
    from ladref.batched.loop import decode_batch
    from ladref.batched.policy import BatchPolicy
    from ladref.batched.sources import batched_sources
    from ladref.fast.static import StaticRunner
    from ladref.pricing.cost import CostModel
    from ladref.pricing.surface import CostSurface
    from ladref.proposer import MAX_DRAFT_DEPTH

    model, (prompt, lookup), samples, accepted = peaky_model(), DRAFT_SOURCES["prompt_lookup"], [], 0
    proposers = [lookup(), DRAFT_SOURCES["recycling"][1]()]
    runner = StaticRunner(model, 48, widths=(1, 4, 16, 32)) if static else None
    flat = CostModel.flat(64)
    surface, sampler = CostSurface.of(flat.stairs(runner.widths) if static else flat), sampler_factory()
    for _ in range(draws):
        sources = batched_sources(proposers, MAX_DRAFT_DEPTH, 8)  # the peaky model's vocabulary
        policy = BatchPolicy(surface, 1, [s.name for s in sources], max(s.depth for s in sources))
        result = decode_batch(model, [prompt], k, {"eos_token_id": []}, "adaptive", sources, policy, sampler, runner=runner)[0]
        samples.append(result.token_ids)
        accepted += result.stats.new_tokens - result.stats.steps
    return joint_counts(samples, 8, k), accepted


class BatchNoRenormalisation(BatchSampler):
    """Biased: a later sibling is tested against q itself, not the residual's renormalised q."""

    def accepts(self, u, q, before):
        return u < q


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static_runner"])
def test_adaptive_sampling_matches_exact_distribution(static):
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    counts, accepted = _sampled_adaptively(static, lambda: BatchSampler("cpu", temperature=0.8, generator=generator), 600)
    assert accepted > 100  # drafts were fed and accepted: the tree walk was exercised
    prompt = DRAFT_SOURCES["prompt_lookup"][0]
    p = chi_square_p(counts, exact_joint(peaky_model(), prompt, 2, warp))
    assert p > ALPHA, f"adaptive samples deviate from the exact distribution (p = {p:.2e})"


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static_runner"])
def test_adaptive_sampling_test_rejects_a_wrong_accept_rule(static):
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    counts, _ = _sampled_adaptively(static, lambda: BatchNoRenormalisation("cpu", temperature=0.8, generator=generator), 600)
    prompt = DRAFT_SOURCES["prompt_lookup"][0]
    assert chi_square_p(counts, exact_joint(peaky_model(), prompt, 2, warp)) < ALPHA
