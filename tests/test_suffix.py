"""Suffix decoding: the counted suffix trie, best-first drafts scaled by the match, the memory across
requests and its bound, exact greedy output (alone, merged, adaptive, in a batch), sampling's law, clear errors."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from families import SUPPORTED, family_model, peaky_model
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, hf_greedy, prompts, seeds, tiny_model, vocab_sizes
from test_proposers import CountForwards
from test_sampling import ALPHA, NoRenormalisation, _sampled_with, chi_square_p, exact_joint

from ladref import (
    BatchResult,
    DraftTree,
    PromptLookupProposer,
    RecyclingProposer,
    StepOutcome,
    SuffixMemory,
    SuffixProposer,
    TreeTemplate,
    adaptive_decode,
    draft_decode,
    greedy_decode,
    suffix_decode,
)
from ladref.pricing.cost import CostModel
from ladref.pricing.surface import CostSurface
from ladref.sampling import SamplingChooser, Warp
from ladref.sources.suffix_trie import SuffixTrie, grow

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2]


def counts(trie: SuffixTrie) -> dict[tuple[int, ...], int]:
    """Every string the trie holds, with its count."""
    found, stack = {}, [((), trie.root)]
    while stack:
        string, node = stack.pop()
        for token, child in node.children.items():
            found[string + (token,)] = child.count
            stack.append((string + (token,), child))
    return found


def substrings(texts: list[list[int]], depth: int) -> Counter:
    """What a trie of `texts` cut at `depth` must hold: every substring of <= depth tokens, counted."""
    return Counter(tuple(t[i : i + n]) for t in texts for n in range(1, depth + 1) for i in range(len(t) - n + 1))


def commit(proposer: SuffixProposer, tokens: list[int]) -> None:
    """`proposer.learn` of a step that accepted `tokens`."""
    proposer.learn(StepOutcome(0, torch.tensor(tokens), DraftTree.empty(), tokens, [], tokens[-1], torch.empty(0, dtype=torch.long)))


# --- the trie ---------------------------------------------------------------------------------


def test_the_trie_counts_every_substring_up_to_its_depth_grown_in_pieces_or_at_once():
    text, other = [1, 2, 3, 1, 2, 4, 1, 2, 3, 3], [2, 3, 5]
    whole, pieces = SuffixTrie(3), SuffixTrie(3)
    whole.extend(text)
    ends = pieces.extend(text[:4])
    pieces.extend(text[4:], ends)  # a text grows from its ends, as a request does step by step
    for trie in (whole, pieces):
        trie.extend(other)  # a second text: its own substrings, none across the two
        assert counts(trie) == substrings([text, other], 3)
        assert trie.nodes == len(substrings([text, other], 3))
    assert whole.find([1, 2]).count == 3 and sorted(whole.find([1, 2]).children) == [3, 4]
    assert whole.find([1, 2, 3, 1]) is None  # deeper than the trie


def test_removing_a_text_leaves_the_trie_of_the_others():
    texts = [[1, 2, 3, 1, 2], [2, 3, 2, 3, 2], [4, 4, 4, 4]]
    trie = SuffixTrie(4)
    for text in texts:
        trie.extend(text)
    trie.remove(texts[1])
    assert counts(trie) == substrings([texts[0], texts[2]], 4) and trie.nodes == len(counts(trie))
    trie.remove(texts[0])
    trie.remove(texts[2])
    assert counts(trie) == {} and trie.nodes == 0


def test_the_patterns_are_the_suffixes_that_something_followed_shortest_first():
    trie = SuffixTrie(8)
    trie.extend([5, 1, 2, 3, 9, 1, 2, 3])
    found = trie.matches([5, 1, 2, 3, 9, 1, 2, 3], 8)
    assert [n for n, _ in found] == [1, 2, 3]  # "9 1 2 3" only ends the text
    assert [{t: c.count for t, c in node.children.items()} for _, node in found] == [{9: 1}] * 3
    assert found[0][1] is trie.find([3]) and found[2][1] is trie.find([1, 2, 3])
    assert [n for n, _ in trie.matches([9, 1, 2, 3], 2)] == [1, 2]  # at most `longest` tokens
    assert len(trie.matches([1, 2, 3, 9], 8)) == 4 and len(trie.matches([4, 2, 3, 9], 8)) == 3  # "1 2 3 9" went on with 1
    assert trie.matches([7, 8], 8) == [] and len(SuffixTrie(3).matches([1] * 9, 8)) == 0


# --- the drafts -------------------------------------------------------------------------------


def test_drafts_grow_best_first_by_continuation_frequency():
    text = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2]  # "1 2" occurred 5 times: went on with 3 three times, with 4 once
    proposer = SuffixProposer(max_depth=4, max_nodes=5, spec_factor=3.0, min_prob=0.1, max_match=4)
    proposer.begin(text)
    tree = proposer.propose(text)
    # 3 (3/5), then its line 1 (3/3 of "1 2 3": 0.6), 2 (0.6), then 3 after "1 2 3 1 2" (2 of 3: 0.4), then the
    # first-level 4 (1/5 = 0.2; the 4 after "1 2 3 1 2" is 0.6 / 3, a hair below)
    assert tree.tokens.tolist() == [3, 1, 2, 3, 4] and tree.parents.tolist() == [-1, 0, 1, 2, -1]
    assert proposer.evidence == 2 and set(tree.sources) == {"suffix"}  # "1 2" earns 5 nodes (score 2.4), "2" only 3 (1.8)
    tokens, parents, score = grow(proposer.trie.find([1, 2]), 5, 4, 0.1)
    assert (tokens, parents) == ([3, 1, 2, 3, 4], [-1, 0, 1, 2, -1]) and score == pytest.approx(3 * 0.6 + 0.4 + 0.2)
    assert grow(proposer.trie.find([1, 2]), 9, 4, 0.3)[0] == [3, 1, 2, 3]  # 0.2 < min_prob: no 4 anywhere
    assert grow(proposer.trie.find([1, 2]), 9, 2, 0.0)[:2] == ([3, 1, 4, 1], [-1, 0, -1, 2])  # two deep: 0.6, 0.6, 0.2, 0.2


def test_speculation_scales_with_the_match_length_and_stops_at_the_caps():
    text = [5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8]  # the last 1-4 tokens occurred once before: 1 2 3 4 5 ... followed

    def drafted(**options) -> tuple[list[int], int]:
        proposer = SuffixProposer(min_prob=0.0, **options)
        proposer.begin(text)
        tree = proposer.propose(text)
        return tree.tokens.tolist(), proposer.evidence

    # each node 1/2 (one earlier occurrence, and the present one): a pattern of L tokens scores L/2 with alpha = 1
    assert drafted() == ([1, 2, 3, 4], 4)
    assert drafted(max_match=2) == ([1, 2], 2)
    assert drafted(spec_factor=0.5) == ([1, 2], 4)  # 4 tokens matched: 2 nodes
    assert drafted(spec_factor=0.2) == ([], 0)  # 0.8 of a node at most: nothing
    assert drafted(spec_factor=3.0) == ([1, 2, 3, 4, 5, 6, 7, 8], 4)  # 12 allowed: the line ends where the text does
    assert drafted(spec_factor=3.0, max_nodes=3) == ([1, 2, 3], 4)  # 3 nodes from any match: a tie, the longest wins
    assert drafted(spec_factor=3.0, max_depth=2) == ([1, 2], 4)  # one line: the depth cap ends it
    proposer = SuffixProposer()
    proposer.begin([1, 2, 3])
    assert len(proposer.propose([1, 2, 3])) == 0 and proposer.evidence == 0  # 3 never went on


def test_merged_matches_grow_one_tree_from_every_pattern():
    text = [1, 2, 3, 5, 2, 4, 5, 2, 4, 5, 1, 2]  # "2" went on with 3 once, with 4 twice; "1 2" with 3 once
    apart = SuffixProposer(max_depth=4, max_nodes=3, spec_factor=2.0, min_prob=0.0, max_match=4)
    merged = SuffixProposer(max_depth=4, max_nodes=3, spec_factor=2.0, min_prob=0.0, max_match=4, merge_matches=True)
    for proposer in (apart, merged):
        proposer.begin(text)
    # apart: "2" earns 2 nodes, 4 (2/4) and its 5 (0.5): 1.0; "1 2" earns 3, its one line 3 5 2 (1/2 each): 1.5, it wins
    assert apart.propose(text).tokens.tolist() == [3, 5, 2] and apart.evidence == 2
    # merged: 3 nodes (alpha x the longest match) from both: 4 after "2" (0.5), 3 after "1 2" (0.5), then 4's 5 (0.5)
    tree = merged.propose(text)
    assert (tree.tokens.tolist(), tree.parents.tolist(), merged.evidence) == ([4, 3, 5], [-1, -1, 0], 2)
    starts = [node for _, node in merged.trie.matches(text, 4)]
    tokens, parents, score = grow(starts, 4, 4, 0.0)
    assert (tokens, parents, score) == ([4, 3, 5, 5], [-1, -1, 0, 1], 2.0)
    assert grow(starts, 9, 4, 0.0)[0].count(3) == 1  # 3 after "2" (1/4) and after "1 2" (1/2): one node, at 0.5


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(1, 12), st.integers(1, 5),
       st.sampled_from([0.0, 0.1, 0.3]))
def test_a_merged_tree_is_a_trie_scoring_at_least_any_one_patterns_tree(text, budget, depth, min_prob):
    trie = SuffixTrie(12)
    trie.extend(text)
    starts = [node for _, node in trie.matches(text, 6)]
    tokens, parents, score = grow(starts, budget, depth, min_prob)
    assert len(tokens) <= budget and all(-1 <= parent < i for i, parent in enumerate(parents))
    assert len(set(zip(parents, tokens))) == len(tokens)  # no path drafted twice
    for start in starts:  # the best-first tree of one start is the top nodes of that start alone: the merged one holds
        alone = grow(start, budget, depth, min_prob)  # the top nodes of all starts, at their highest probability
        assert alone == grow([start], budget, depth, min_prob) and score >= alone[2] - 1e-9


def test_the_request_trie_grows_with_every_committed_step():
    proposer = SuffixProposer(min_prob=0.0)
    proposer.begin([7, 1, 2])
    assert len(proposer.propose([7, 1, 2])) == 0
    commit(proposer, [3, 9])
    commit(proposer, [1, 2])  # the text is now 7 1 2 3 9 1 2: "1 2" went on with 3 before
    assert proposer.propose([7, 1, 2, 3, 9, 1, 2]).tokens.tolist() == [3, 9]


# --- the memory -------------------------------------------------------------------------------


def test_a_memory_drafts_from_earlier_requests_outputs_and_copies_share_it():
    memory = SuffixMemory()
    first = SuffixProposer(min_prob=0.0, memory=memory)
    first.begin([9])
    commit(first, [1, 2, 3, 4, 5])
    for proposer in (SuffixProposer(min_prob=0.0, memory=memory), first):  # another proposer, or the same one's next request
        proposer.begin([7, 1, 2])
        assert proposer.propose([7, 1, 2]).tokens.tolist() == [3, 4] and proposer.evidence == 2
    alone = SuffixProposer(min_prob=0.0)
    alone.begin([7, 1, 2])
    assert len(alone.propose([7, 1, 2])) == 0
    twin = copy.deepcopy(first)  # as each row of a batch gets: its own request trie, the same memory
    assert twin.memory is memory and twin.trie is not first.trie and twin.max_depth == first.max_depth
    assert copy.deepcopy(SuffixProposer(merge_matches=True)).merge_matches


def test_the_memory_evicts_its_oldest_requests_past_its_bound():
    memory = SuffixMemory(max_tokens=10, depth=4)
    a, b = memory.open(), memory.open()
    memory.record(a, [1, 2, 3, 4, 5, 6])
    memory.record(b, [7, 8, 9])
    assert memory.tokens == 9 and list(memory.records) == [a, b]
    memory.record(b, [1, 2, 3])  # 12 tokens: the oldest request leaves
    assert memory.tokens == 6 and list(memory.records) == [b]
    assert counts(memory.trie) == substrings([[7, 8, 9, 1, 2, 3]], 4)
    memory.record(a, [5, 5])  # an evicted request records nothing more
    c = memory.open()
    memory.record(c, list(range(20)))  # one request alone keeps the bound: its first 10 tokens
    assert memory.tokens == 10 and list(memory.records) == [c] and counts(memory.trie) == substrings([list(range(10))], 4)
    memory.record(c, [3])
    assert memory.tokens == 10


def test_a_memory_across_calls_finds_the_earlier_outputs_and_stays_exact():
    model = tiny_model("qwen2", 32, 2)
    prompt = [3, 14, 15, 9, 26, 5]
    expected = hf_greedy(model, prompt, 30)
    alone = [suffix_decode(model, prompt, 30, eos_token_id=[]) for _ in range(2)]
    memory = SuffixMemory()
    remembering = [suffix_decode(model, prompt, 30, memory=memory, eos_token_id=[]) for _ in range(2)]
    assert all(r.token_ids == expected for r in alone + remembering)
    assert alone[1].stats.steps == alone[0].stats.steps  # nothing kept across calls
    assert remembering[1].stats.steps < remembering[0].stats.steps  # the first call's output is drafted from
    assert memory.tokens >= 60 and len(memory.records) == 2


# --- exactness --------------------------------------------------------------------------------


def decoders(vocab: int):
    """(name, decode(model, prompt, n, eos)) with a suffix proposer: alone, with a memory, its matches merged, with other
    proposers, adaptive."""
    def twice_with_memory(m, p, n, e):
        memory = SuffixMemory(max_tokens=16)  # small: the second call evicts part of the first's output
        suffix_decode(m, p, n, memory=memory, eos_token_id=e)
        return suffix_decode(m, p, n, memory=memory, min_prob=0.0, spec_factor=2.0, eos_token_id=e)

    return [
        ("suffix", lambda m, p, n, e: suffix_decode(m, p, n, eos_token_id=e)),
        ("suffix, wide", lambda m, p, n, e: suffix_decode(m, p, n, max_depth=3, max_nodes=6, spec_factor=4.0, min_prob=0.0,
                                                          eos_token_id=e)),
        ("suffix, memory", twice_with_memory),
        ("suffix, merged matches", lambda m, p, n, e: suffix_decode(m, p, n, memory=SuffixMemory(), max_nodes=8, spec_factor=8.0,
                                                                    min_prob=0.0, merge_matches=True, eos_token_id=e)),
        ("merged", lambda m, p, n, e: draft_decode(m, p, n, proposers=[SuffixProposer(), PromptLookupProposer(draft_len=3),
                                                                       RecyclingProposer(vocab, TreeTemplate.best_first(12, 3, 4))],
                                                   eos_token_id=e)),
        ("adaptive", lambda m, p, n, e: adaptive_decode(m, p, n, cost=CostModel.flat(64), eos_token_id=e,
                                                        proposers=[SuffixProposer(memory=SuffixMemory()), PromptLookupProposer()])),
    ]


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 40))
def test_suffix_decoding_is_exactly_greedy(arch, vocab, seed, data, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))  # EOS may fall inside an accepted path
    expected = hf_greedy(model, prompt, max_new_tokens, eos)  # transformers' generate
    assert greedy_decode(model, prompt, max_new_tokens, eos_token_id=[] if eos is None else eos).token_ids == expected
    for name, decode in decoders(vocab):
        result = decode(model, prompt, max_new_tokens, [] if eos is None else eos)
        assert result.token_ids == expected, name
        assert result.stats.new_tokens == len(expected) and result.stats.steps <= len(expected), name


@pytest.mark.parametrize("family", SUPPORTED)
def test_every_family_decodes_exactly_greedy(family):
    model = family_model(family, 16, 0)
    expected = hf_greedy(model, PROMPT, 24)
    for name, decode in decoders(16)[:4]:
        assert decode(model, PROMPT, 24, None).token_ids == expected, (family, name)


def test_repetitive_text_is_accepted_in_long_paths_and_credited_to_suffix():
    model = tiny_model("llama", 16, 0)  # its greedy text cycles with period 5
    stats = suffix_decode(model, [1, 2, 3], 60, eos_token_id=[]).stats
    assert stats.compression > 2.5 and max(stats.accepted_by_source["suffix"]) >= 4
    assert max(stats.draft_tokens_per_step) <= 12  # spec_factor * max_match = 12 nodes at most (max_nodes is 16)


@settings(max_examples=6, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_every_row_of_a_batch_equals_its_batch_1_greedy_output(arch, vocab, seed, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=2, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))
    memory = SuffixMemory()
    for result in (suffix_decode(model, batch, budgets, memory=memory, eos_token_id=[]),
                   adaptive_decode(model, batch, budgets, cost=CostSurface.roofline(0.01, 0.0001), eos_token_id=[],
                                   proposers=[SuffixProposer(memory=memory)])):
        assert isinstance(result, BatchResult) and len(result) == len(batch)
        for prompt, budget, row in zip(batch, budgets, result):
            assert row.token_ids == greedy_decode(model, prompt, budget, eos_token_id=[]).token_ids
    outputs = [text for text, _ in memory.records.values()]  # the rows shared one memory: every row's output is in it, ...
    assert sorted(outputs) == sorted(2 * [row.token_ids for row in result])  # ... exactly: nothing past its budget


# --- sampling ---------------------------------------------------------------------------------

SAMPLED_PROMPT = [0, 4, 0, 0, 5, 0, 7, 2, 0]  # the last token 0 went on with 4, 0, 5 and 7 before


def remembering_proposer() -> SuffixProposer:
    """A wide tree after one matched token, and a memory that learns across the draws (each draw stays exact)."""
    return SuffixProposer(max_depth=2, max_nodes=8, spec_factor=4.0, min_prob=0.0, memory=SuffixMemory(256))


def test_suffix_sampling_matches_exact_distribution():
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    counts_, accepted = _sampled_with(SAMPLED_PROMPT, remembering_proposer, lambda: SamplingChooser(warp, generator), 600)
    assert accepted > 100  # drafts were accepted: the tree walk was exercised
    p = chi_square_p(counts_, exact_joint(peaky_model(), SAMPLED_PROMPT, 2, warp))
    assert p > ALPHA, f"suffix samples deviate from the exact distribution (p = {p:.2e})"


def test_suffix_sampling_test_rejects_a_wrong_accept_rule():
    generator, warp = torch.Generator().manual_seed(21), Warp(temperature=0.8)
    counts_, _ = _sampled_with(SAMPLED_PROMPT, remembering_proposer, lambda: NoRenormalisation(warp, generator), 600)
    assert chi_square_p(counts_, exact_joint(peaky_model(), SAMPLED_PROMPT, 2, warp)) < ALPHA


# --- bad input --------------------------------------------------------------------------------


def used_by(vocab: int) -> SuffixMemory:
    """A memory that served a model of `vocab` tokens."""
    memory = SuffixMemory()
    suffix_decode(tiny_model("llama", vocab, 0), [1, 2], 2, memory=memory)
    return memory


@pytest.mark.parametrize("call, error, message", [
    (lambda m: suffix_decode(m, PROMPT, max_depth=0), ValueError, "max_depth must be >= 1"),
    (lambda m: suffix_decode(m, PROMPT, max_depth=2.0), TypeError, "max_depth must be an int"),
    (lambda m: suffix_decode(m, PROMPT, max_nodes=True), TypeError, "max_nodes must be an int"),
    (lambda m: suffix_decode(m, PROMPT, max_match=0), ValueError, "max_match must be >= 1"),
    (lambda m: suffix_decode(m, PROMPT, spec_factor=0), ValueError, "spec_factor must be a positive number, got 0"),
    (lambda m: suffix_decode(m, PROMPT, spec_factor=-1.5), ValueError, "spec_factor must be a positive number"),
    (lambda m: suffix_decode(m, PROMPT, spec_factor=float("nan")), ValueError, "spec_factor must be a positive number"),
    (lambda m: suffix_decode(m, PROMPT, spec_factor="2"), TypeError, "spec_factor must be a positive number, got str"),
    (lambda m: suffix_decode(m, PROMPT, min_prob=1.0), ValueError, "min_prob must be a number in \\[0, 1\\)"),
    (lambda m: suffix_decode(m, PROMPT, memory=SuffixMemory(max_tokens=0)), ValueError, "max_tokens must be >= 1"),
    (lambda m: suffix_decode(m, PROMPT, memory=SuffixMemory(max_tokens=1e4)), TypeError, "max_tokens must be an int"),
    (lambda m: suffix_decode(m, PROMPT, memory=SuffixMemory(depth=0)), ValueError, "depth must be >= 2"),
    (lambda m: suffix_decode(m, PROMPT, memory={}), TypeError, "memory must be a SuffixMemory or None, got dict"),
    (lambda m: suffix_decode(m, PROMPT, merge_matches=1), TypeError, "merge_matches must be a bool, got int"),
    (lambda m: suffix_decode(m, PROMPT, proposer=PromptLookupProposer()), TypeError, "proposer must be a SuffixProposer"),
    (lambda m: suffix_decode(m, PROMPT, proposer=SuffixProposer(vocab_size=8)), ValueError, "made for a vocabulary of 8 ids"),
    (lambda m: suffix_decode(m, PROMPT, eos=3), TypeError, "unexpected keyword argument 'eos'"),
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


@pytest.mark.parametrize("call", [
    lambda m, memory: suffix_decode(m, PROMPT, memory=memory),
    lambda m, memory: suffix_decode(m, PROMPT, proposer=SuffixProposer(memory=memory)),
    lambda m, memory: draft_decode(m, PROMPT, proposers=[SuffixProposer.for_model(m, memory=memory)]),
    lambda m, memory: adaptive_decode(m, PROMPT, cost=CostModel.flat(8), proposers=[SuffixProposer.for_model(m, memory=memory)]),
], ids=["suffix_decode", "its proposer", "draft_decode", "adaptive_decode"])
def test_a_memory_shared_between_vocabularies_is_refused_before_any_forward_pass(call):
    memory, model = used_by(8), tiny_model("llama", 16, 0)
    counter = CountForwards(model)
    try:
        with pytest.raises(ValueError, match="holds tokens of a vocabulary of 8 ids, the model's has 16: a memory cannot be shared"):
            call(model, memory)
    finally:
        counter.handle.remove()
    assert counter.calls == 0
