"""Every draft source through the one tree step: exact greedy output, honest statistics, clear errors."""

from __future__ import annotations

import pytest
import torch
from families import SUPPORTED, family_model
from hypothesis import given
from hypothesis import strategies as st
from strategies import architectures, hf_greedy, prompts, seeds, tiny_model, vocab_sizes

from ladref import (
    DraftSource,
    DraftTree,
    JacobiProposer,
    LookaheadConfig,
    LookaheadProposer,
    PromptLookupProposer,
    RecyclingProposer,
    TreeTemplate,
    draft_decode,
    jacobi_decode,
    prompt_lookup_decode,
    recycling_decode,
)

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2]


def all_sources(vocab: int) -> list:
    return [PromptLookupProposer(draft_len=4, max_matches=2), RecyclingProposer(vocab, TreeTemplate.best_first(12, 3, 4)),
            LookaheadProposer(LookaheadConfig(3, 3, 2)), JacobiProposer(3)]


def decoders(vocab: int):
    """(name, decode(model, prompt, n, eos)) for every tree decoder, one source or all of them merged."""
    return [
        ("prompt_lookup", lambda m, p, n, e: prompt_lookup_decode(m, p, n, eos_token_id=e)),
        ("prompt_lookup, 2 matches", lambda m, p, n, e: prompt_lookup_decode(m, p, n, max_matches=2, draft_len=3, eos_token_id=e)),
        ("recycling", lambda m, p, n, e: recycling_decode(m, p, n, template=TreeTemplate.best_first(20, 4, 5), eos_token_id=e)),
        ("jacobi", lambda m, p, n, e: jacobi_decode(m, p, n, block_size=3, eos_token_id=e)),
        ("all merged", lambda m, p, n, e: draft_decode(m, p, n, proposers=all_sources(vocab), eos_token_id=e)),
        ("all, budget 5", lambda m, p, n, e: draft_decode(m, p, n, proposers=all_sources(vocab), draft_budget=5, eos_token_id=e)),
    ]


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 40))
def test_every_proposer_decodes_exactly_greedy(arch, vocab, seed, data, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))  # EOS may fall inside an accepted path
    expected = hf_greedy(model, prompt, max_new_tokens, eos)
    for name, decode in decoders(vocab):
        result = decode(model, prompt, max_new_tokens, [] if eos is None else eos)
        assert result.token_ids == expected, name
        assert result.stats.new_tokens == len(expected) and result.stats.steps <= len(expected), name


@pytest.mark.parametrize("family", SUPPORTED)
def test_every_family_decodes_exactly_greedy(family):
    model = family_model(family, 16, 0)
    expected = hf_greedy(model, PROMPT, 24)
    for name, decode in decoders(16):
        assert decode(model, PROMPT, 24, None).token_ids == expected, (family, name)


def test_repetitive_text_is_accepted_in_long_paths_and_credited_to_its_source():
    model = tiny_model("llama", 16, 0)  # its greedy text cycles with period 5
    lookup = prompt_lookup_decode(model, [1, 2, 3], 60, eos_token_id=[])
    recycled = recycling_decode(model, [1, 2, 3], 60, eos_token_id=[])
    for result, source in ((lookup, "prompt_lookup"), (recycled, "recycling")):
        stats = result.stats
        assert stats.compression > 2.5
        histogram = stats.accepted_by_source[source]
        assert max(histogram) >= 3 and sum(histogram.values()) <= stats.steps
        drafted = sum(k * n for k, n in histogram.items())  # accepted drafts; the last step may be cut by max_new_tokens
        before_last = sum(a - 1 for a in stats.accepted_per_step[:-1])
        assert before_last + stats.accepted_per_step[-1] - 1 <= drafted <= before_last + 10  # drafts are <= 10 deep
        assert set(stats.window_tokens_per_step) == {0}
        assert [1 + d for d in stats.draft_tokens_per_step] == stats.forward_tokens_per_step


def test_prompt_lookup_proposes_what_followed_the_longest_matching_suffix():
    proposer = PromptLookupProposer(draft_len=3, max_ngram=3, min_ngram=1, max_matches=2)
    proposer.begin([5, 6, 7, 8, 9, 6, 7, 1, 2, 6, 7])
    assert [proposer.propose([7]).path_tokens(i) for i in (2, 5)] == [[1, 2, 6], [8, 9, 6]]  # "6 7" twice, most recent first
    proposer.begin([5, 6, 7, 8])
    assert len(proposer.propose([8])) == 0  # 8 never occurred before its last occurrence


def test_recycling_grows_its_template_from_the_adjacency_and_forgets_unless_warm():
    template = TreeTemplate(((0,), (1,), (0, 0), (0, 1), (1, 0)))
    cold, warm = RecyclingProposer(10, template), RecyclingProposer(10, template, warm=True)
    for proposer in (cold, warm):
        proposer.begin([1])
        proposer.adjacency[1] = torch.tensor([2, 3])
        proposer.adjacency[2] = torch.tensor([4, -1])  # an unknown successor drops its node
        tree = proposer.propose([1])
        assert tree.tokens.tolist() == [2, 3, 4] and tree.parents.tolist() == [-1, -1, 0]
        proposer.begin([1])
    assert len(cold.propose([1])) == 0 and len(warm.propose([1])) == 3
    model = tiny_model("llama", 16, 0)
    shared = RecyclingProposer.for_model(model, warm=True)
    first = recycling_decode(model, [1, 2, 3], 30, proposer=shared, eos_token_id=[])
    second = recycling_decode(model, [1, 2, 3], 30, proposer=shared, eos_token_id=[])  # starts with what the first learned
    assert second.token_ids == first.token_ids and second.stats.steps < first.stats.steps


def test_best_first_template_is_ancestor_closed_and_sized():
    template = TreeTemplate.best_first(80, 8, 6)
    assert len(template.paths) == 80 and template.topk <= 8 and template.depth <= 6
    assert all(len(p) == 1 or p[:-1] in template.paths for p in template.paths)


class CountForwards:
    def __init__(self, model):
        self.calls, self.handle = 0, model.register_forward_pre_hook(lambda *a: setattr(self, "calls", self.calls + 1))


class Stray(DraftSource):
    name = "stray"

    def begin(self, prompt):
        pass

    def propose(self, context):
        return DraftTree.from_paths([[999]], self.name)

    def learn(self, outcome):
        pass


@pytest.mark.parametrize("call, error, message", [
    (lambda m: draft_decode(m, PROMPT, proposers=[object()]), TypeError, "object does not implement the Proposer protocol: missing name"),
    (lambda m: draft_decode(m, PROMPT, proposers=[]), ValueError, "at least one proposer"),
    (lambda m: draft_decode(m, PROMPT, proposers=[Stray()]), ValueError, "Stray proposed a token outside the model's vocabulary"),
    (lambda m: draft_decode(m, PROMPT, proposers=[JacobiProposer()], draft_budget=0), ValueError, "draft_budget must be >= 1"),
    (lambda m: draft_decode(m, PROMPT, proposers=[JacobiProposer()], draft_budget=2.5), TypeError, "draft_budget must be an int"),
    (lambda m: draft_decode(m, PROMPT, proposers=[LookaheadProposer(LookaheadConfig()), LookaheadProposer(LookaheadConfig())]),
     ValueError, "at most one proposer may bring a lookahead window"),
    (lambda m: recycling_decode(m, PROMPT, topk=0), ValueError, "topk must be >= 1"),
    (lambda m: recycling_decode(m, PROMPT, topk=True), TypeError, "topk must be an int"),
    (lambda m: recycling_decode(m, PROMPT, topk=2), ValueError, "needs topk >= "),
    (lambda m: recycling_decode(m, PROMPT, template=[(0,)]), TypeError, "template must be a TreeTemplate"),
    (lambda m: recycling_decode(m, PROMPT, proposer=RecyclingProposer(7)), ValueError, "adjacency has 7 rows"),
    (lambda m: TreeTemplate(((0, 1),)), ValueError, "before \\(or without\\) its parent"),
    (lambda m: TreeTemplate.best_first(size=0), ValueError, "size must be >= 1"),
    (lambda m: TreeTemplate.best_first(size="8"), TypeError, "size must be an int"),
    (lambda m: prompt_lookup_decode(m, PROMPT, draft_len=0), ValueError, "draft_len must be >= 1"),
    (lambda m: prompt_lookup_decode(m, PROMPT, min_ngram=3, max_ngram=2), ValueError, "min_ngram \\(3\\) must be <= max_ngram"),
    (lambda m: recycling_decode("gpt2", PROMPT), TypeError, "model must be a transformers causal LM"),
])
def test_bad_input_is_refused_before_any_forward_pass(call, error, message):
    model = tiny_model("llama", 16, 0)
    counter = CountForwards(model)
    try:
        with pytest.raises(error, match=message):
            call(model)
    finally:
        counter.handle.remove()
    assert counter.calls == 0
