"""Batched prompt lookup against the one-prompt proposer and decoder, row by row (with and without a
memory of earlier outputs), and its op count."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from ladref import DraftTree, PromptLookupProposer, greedy_decode, prompt_lookup_decode
from ladref.batched.drafts import ancestor_table, merge
from ladref.batched.loop import decode_batch
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.batched.state import BatchState
from ladref.sources.suffix_trie import SuffixMemory

pytestmark = pytest.mark.usefixtures("one_thread")

READS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "item")


def state_of(text: torch.Tensor, length: torch.Tensor) -> BatchState:
    """A batch state holding (B, X) `text`, its rows `length` long (nothing produced yet)."""
    rows = text.shape[0]
    zeros = torch.zeros(rows, dtype=torch.long)
    return BatchState(text, length, length.clone(), zeros, zeros + 100, zeros.bool(), torch.arange(rows),
                      torch.zeros(0, dtype=torch.long), text.gather(1, (length - 1)[:, None])[:, 0])


def random_text(rng: random.Random, rows: int, width: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, X) random ids (scratch past each row's length too) and (B,) lengths in 1..X, often periodic."""
    text = torch.randint(0, vocab, (rows, width), generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
    for b in range(rows):
        if rng.random() < 0.5:
            period = rng.randint(1, 4)
            text[b] = text[b, :period].repeat(width // period + 1)[:width]
    return text, torch.tensor([rng.randint(1, width) for _ in range(rows)])


def memory_of(outputs: list[list[int]], max_tokens: int) -> SuffixMemory:
    """A memory holding `outputs` as earlier requests' records (the oldest evicted past `max_tokens`)."""
    memory = SuffixMemory(max_tokens, depth=4)
    for output in outputs:
        memory.record(memory.open(), output)
    return memory


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 100_000), st.booleans())
def test_every_rows_proposal_is_the_one_prompt_proposers(seed, remembers):
    rng = random.Random(seed)
    draft_len, max_ngram = rng.randint(1, 6), rng.randint(1, 4)
    min_ngram, max_matches = rng.randint(1, max_ngram), rng.randint(1, 4)
    vocab = rng.randint(1, 4)
    text, length = random_text(rng, rng.randint(1, 5), rng.randint(1, 24), vocab)
    outputs = [random_text(rng, 1, rng.randint(1, 8), vocab)[0][0].tolist() for _ in range(rng.randint(0, 4))]
    limit = rng.randint(1, 30)  # the memory's max_tokens: its corpus is cut to it, separators included
    memory = (lambda: memory_of(outputs, limit)) if remembers else (lambda: None)
    source = BatchPromptLookup(draft_len, max_ngram, min_ngram, max_matches, memory())
    state = state_of(text, length)
    source.begin(state)
    drafts = source.propose(state)
    assert drafts.tokens.shape == drafts.valid.shape == (text.shape[0], max_matches * draft_len)
    assert drafts.parents.shape == (max_matches * draft_len,)
    assert bool((drafts.tokens[~drafts.valid] == 0).all())
    merged = merge(drafts, ancestor_table(drafts.parents.expand_as(drafts.tokens), draft_len))
    for b in range(text.shape[0]):
        one = PromptLookupProposer(draft_len, max_ngram, min_ngram, max_matches, memory())
        one.begin(text[b, : length[b]].tolist())
        tree = one.propose(text[b, : length[b]].tolist())
        chains = drafts.tokens[b].view(max_matches, draft_len)
        valid = drafts.valid[b].view(max_matches, draft_len)
        paths = [chain[ok].tolist() for chain, ok in zip(chains, valid) if ok.any()]
        ours = DraftTree.from_paths(paths, one.name)
        assert ours.tokens.tolist() == tree.tokens.tolist() and ours.parents.tolist() == tree.parents.tolist()
        assert int(drafts.evidence[b, 0]) == one.evidence
        kept = merged.kept[b].nonzero().flatten().tolist()  # the step's trie: the reference's nodes
        spelled = merged.spelled[b]
        assert sorted(tuple(t for t in spelled[i].tolist()[::-1] if t >= 0) for i in kept) == \
            sorted(tuple(tree.path_tokens(i)) for i in range(len(tree)))


def test_a_memory_is_searched_before_the_prompt_each_output_on_its_own():
    memory = memory_of([[5, 6, 7, 1, 2], [3, 4, 8, 9]], 64)
    assert memory.corpus(64) == [5, 6, 7, 1, 2, -1, 3, 4, 8, 9, -1] and memory.corpus(4) == [4, 8, 9, -1]
    cases = {  # prompt -> (drafts, evidence), with draft_len 4
        (0, 5, 6): ([[7, 1, 2]], 2),  # only the memory has it: its continuation, cut at the output's end
        (0, 9): ([], 0),  # 9 ends an output: nothing follows it there
        (6, 7, 0, 6, 7): ([[0, 6, 7]], 2),  # as long a match in the request's own text: the request's (more recent)
        (2, 3): ([[4, 8, 9]], 1),  # no match spans two outputs ([2, 3] crosses a separator): the 1-gram [3]'s
    }
    for prompt, (paths, evidence) in cases.items():
        one = PromptLookupProposer(4, max_ngram=3, memory=memory)
        one.begin(list(prompt))
        assert [one.text[one.start:], one.propose(list(prompt)).tokens.tolist(), one.evidence] == \
            [list(prompt), [t for path in paths for t in path], evidence], prompt
        source = BatchPromptLookup(4, max_ngram=3, memory=memory)
        state = state_of(torch.tensor([list(prompt)]), torch.tensor([len(prompt)]))
        source.begin(state)
        drafts = source.propose(state)
        assert drafts.tokens[drafts.valid].tolist() == [t for path in paths for t in path] and int(drafts.evidence) == evidence


def test_a_batch_records_every_rows_output_in_its_memory_when_the_call_ends():
    model = tiny_model("llama", 16, 0)
    memory = memory_of([[9, 9, 4]], 64)
    lines, budgets = [[1, 2, 3, 1, 2], [4, 5, 4]], [7, 5]
    result = decode_batch(model, lines, budgets, {"eos_token_id": []}, "prompt_lookup", [BatchPromptLookup(3, memory=memory)])
    assert [row.token_ids for row in result] == [greedy_decode(model, p, b, eos_token_id=[]).token_ids for p, b in zip(lines, budgets)]
    assert [record for record, _ in memory.records.values()] == [[9, 9, 4]] + [row.token_ids for row in result]
    again = prompt_lookup_decode(model, lines[0], 7, eos_token_id=[], draft_len=3, memory=memory)  # the one-prompt decoder
    assert again.token_ids == result[0].token_ids and memory.corpus(64)[-8:] == result[0].token_ids + [-1]
    assert sum(again.stats.accepted_by_source["prompt_lookup"].values()) > 0


@st.composite
def batches(draw):
    """A model, rows of different prompts and budgets, an EOS (or none) and the source's settings."""
    vocab = draw(st.sampled_from((8, 16)))
    rows = draw(st.integers(1, 4))
    lines = [draw(prompts(vocab, 1, 14)) for _ in range(rows)]
    budgets = [draw(st.integers(1, 24)) for _ in range(rows)]
    eos = draw(st.lists(st.integers(0, vocab - 1), max_size=1))
    settings_ = dict(draft_len=draw(st.integers(1, 6)), max_ngram=draw(st.integers(1, 3)), max_matches=draw(st.integers(1, 3)))
    settings_["min_ngram"] = draw(st.integers(1, settings_["max_ngram"]))
    outputs = draw(st.lists(prompts(vocab, 1, 10), max_size=3))  # earlier outputs in a memory, or none
    remembered = draw(st.sampled_from([None, draw(st.integers(1, 24))]))
    settings_["memory"] = (lambda: None) if remembered is None else (lambda: memory_of(outputs, remembered))
    return tiny_model(draw(architectures), vocab, draw(st.integers(0, 3))), lines, budgets, eos, settings_


@settings(max_examples=12, deadline=None)
@given(batches())
# a row on its last step with a trie wider than deep (5 nodes of depth 2): more verified tokens than the text has room for
@example((tiny_model("llama", 16, 3), [[15] * 5, [0]], [6, 1], [], dict(draft_len=2, max_ngram=1, min_ngram=1, max_matches=3)))
@example((tiny_model("llama", 16, 1), [[3, 4], [7]], [9, 6], [], dict(draft_len=3, max_ngram=2, min_ngram=1, max_matches=2,
                                                                       memory=lambda: memory_of([[3, 4, 5, 6, 3, 4]], 20))))
def test_a_batch_decodes_as_the_one_prompt_decoder_row_by_row(batch):
    model, lines, budgets, eos, options = batch
    memory = options.pop("memory", lambda: None)  # each decoder its own copy of the same memory
    result = decode_batch(model, lines, budgets, {"eos_token_id": eos}, "prompt_lookup", [BatchPromptLookup(**options, memory=memory())])
    for prompt, budget, row in zip(lines, budgets, result):
        kept = memory()
        one = prompt_lookup_decode(model, prompt, budget, eos_token_id=eos, memory=kept, **options)
        assert row.token_ids == one.token_ids == greedy_decode(model, prompt, budget, eos_token_id=eos).token_ids
        assert kept is None or list(kept.records.values())[-1][0] == one.token_ids[: kept.max_tokens]  # its output, cut at its stop
        assert row.stats.steps == one.stats.steps
        assert row.stats.accepted_per_step == one.stats.accepted_per_step
        assert row.stats.forward_tokens_per_step == one.stats.forward_tokens_per_step
        assert row.stats.accepted_by_source == one.stats.accepted_by_source


class Ops(TorchDispatchMode):
    """Every aten op dispatched inside the mode, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def propose_ops(source: BatchPromptLookup, rows: int, width: int = 64) -> list[str]:
    """The aten ops of one propose (and learn) over `rows` random rows."""
    text, length = random_text(random.Random(rows), rows, width, 4)
    state = state_of(text, length)
    source.begin(state)
    with torch.inference_mode(), Ops() as ops:
        source.propose(state)
        source.learn(state, None, slice(0, 0))
    return ops.names


@pytest.mark.parametrize("max_matches", [1, 3])
def test_proposing_reads_nothing_and_costs_the_same_ops_for_any_batch(max_matches):
    source = BatchPromptLookup(draft_len=5, max_ngram=3, max_matches=max_matches)
    one, eight = propose_ops(source, 1), propose_ops(source, 8)
    assert one == eight
    assert not [name for name in one if name.split(".")[0].lstrip("_") in {r.lstrip("_") for r in READS}]
    assert len(one) <= 36  # 32 at present, 11 of them views


def test_settings_are_checked():
    with pytest.raises(ValueError, match="min_ngram"):
        BatchPromptLookup(max_ngram=2, min_ngram=3)
    with pytest.raises(TypeError, match="memory must be a SuffixMemory"):
        PromptLookupProposer(memory={})
    memory = memory_of([[1, 2]], 8)
    memory.bind(16)
    with pytest.raises(ValueError, match="vocabulary of 16 ids"):  # a memory of another model's tokens
        prompt_lookup_decode(tiny_model("llama", 8, 0), [1, 2], 2, memory=memory)
    with pytest.raises((TypeError, ValueError), match="draft_len"):
        BatchPromptLookup(draft_len=0)
