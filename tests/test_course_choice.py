"""A cost-aware step choice: greedy's output whatever it feeds, fewer modelled seconds than feeding
everything or nothing on a CPU-like and on a GPU-like cost surface, and clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from strategies import build_tiny, hf_greedy

from ladref import DraftTree, LookaheadConfig, LookaheadProposer, PromptLookupProposer
from ladref.course_choice import CostAwareChoice
from ladref.decoders.draft import decode_with_proposers
from ladref.proposer import MAX_DRAFT_DEPTH
from ladref.step import DraftBudget

pytestmark = pytest.mark.task2_3


def cpu_cost(q: int, kv: int) -> float:
    """A CPU-like pass: 20 ms, twice that at 12 tokens, a little more with every cached token."""
    return 0.02 + 0.02 / 12 * q + 2e-5 * kv + 4e-6 * q * kv


def gpu_cost(q: int, kv: int) -> float:
    """A GPU-like pass: 10 ms up to 64 tokens, then each token costs more, the more so at long KV."""
    return 0.01 + 1e-5 * kv + max(q - 64, 0) * (0.01 / 64 + 5e-6 * kv)


class Nothing:
    """Feeds no draft and no window: greedy decoding's steps."""

    def choose(self, trees, evidence, kv, window_cells):
        return DraftTree.empty(), False

    def observe(self, tokens):
        pass

    def timed(self, fed, kv, seconds):
        pass


# (architecture, vocabulary, seed, prompt, proposers, cost surface)
RUNS = {
    "cpu": ("llama", 8, 2, [1, 2, 3, 1, 2], lambda: [LookaheadProposer(LookaheadConfig(10, 5, 10)), PromptLookupProposer(6, 2)],
            cpu_cost),
    "gpu": ("gpt2", 16, 0, [5, 1, 5, 2, 5, 1, 5, 2],
            lambda: [LookaheadProposer(LookaheadConfig(16, 5, 16)), PromptLookupProposer(10, 3, max_matches=6)], gpu_cost),
}


def decode(run: str, choice, new_tokens: int = 40) -> tuple[list[int], float]:
    """The run's tokens with `choice` at every step, and their modelled seconds on its surface."""
    arch, vocab, seed, prompt, proposers, cost = RUNS[run]
    result = decode_with_proposers(build_tiny(arch, vocab, seed), torch.tensor(prompt), new_tokens, proposers(), "draft",
                                   MAX_DRAFT_DEPTH, {}, choice=lambda runner: choice)
    kv, seconds = len(prompt) - 1, 0.0
    for fed, accepted in zip(result.stats.forward_tokens_per_step, result.stats.accepted_per_step):
        seconds += cost(fed, kv)
        kv += accepted
    return result.token_ids, seconds


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_choice_keeps_greedy_output(run):
    """Whatever the choice feeds, the tokens are greedy decoding's (transformers' generate, float64)."""
    arch, vocab, seed, prompt, _, cost = RUNS[run]
    tokens, _ = decode(run, CostAwareChoice(cost))
    assert tokens == hf_greedy(build_tiny(arch, vocab, seed), prompt, 40)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_choice_beats_feeding_everything_and_feeding_nothing(run):
    """On a CPU-like and on a GPU-like surface, the choice's decode takes fewer modelled seconds than
    feeding every proposed node and the window at every step, and than feeding nothing."""
    cost = RUNS[run][-1]
    tokens, chosen = decode(run, CostAwareChoice(cost))
    everything, nothing = decode(run, DraftBudget()), decode(run, Nothing())
    assert tokens == everything[0] == nothing[0]
    assert chosen < 0.95 * everything[1] and chosen < 0.8 * nothing[1], (chosen, everything[1], nothing[1])


def test_the_choice_feeds_a_prefix_of_the_proposed_trie_and_learns_whose_drafts_pay():
    """Each step feeds the first nodes of the merged trie; once the lookahead drafts have always been
    wrong and prompt lookup's right, a CPU-like step feeds prompt lookup's path and no lookahead node."""
    choice = CostAwareChoice(cpu_cost)
    trees = [DraftTree.from_paths([[4, 5, 6], [4, 7]], "prompt_lookup"), DraftTree.from_paths([[8, 9]], "lookahead")]
    merged = trees[0].merge(trees[1])
    for kv in range(10, 40):
        fed, window = choice.choose(trees, [0, 0], kv, 8)
        assert isinstance(window, bool) and len(fed) <= len(merged)
        assert fed.tokens.tolist() == merged.tokens[: len(fed)].tolist()
        assert fed.parents.tolist() == merged.parents[: len(fed)].tolist()
        choice.observe([4, 5, 6, 3])  # greedy's next tokens: prompt lookup's 4 -> 5 -> 6, then 3
    assert [4, 5, 6] in [fed.path_tokens(node) for node in range(len(fed))]
    assert "lookahead" not in fed.sources


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="cost must be a callable"):
        CostAwareChoice(0.02)
    with pytest.raises(ValueError, match="prior"):
        CostAwareChoice(cpu_cost, prior=1.5)
    with pytest.raises(TypeError, match="window_sources"):
        CostAwareChoice(cpu_cost, window_sources=["lookahead"])
    tree = [DraftTree.from_paths([[1, 2]], "prompt_lookup")]
    for bad in (lambda q, kv: -1.0, lambda q, kv: math.nan, lambda q, kv: "fast"):
        with pytest.raises(ValueError, match="positive finite"):
            CostAwareChoice(bad).choose(tree, [0], 5, None)
