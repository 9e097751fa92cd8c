"""Any Proposer in a batch (`RowProposers`) and suffix decoding's batch form, against the one-prompt loop row by row."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, tiny_model
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ladref import (DraftSource, DraftTree, PromptLookupProposer, SuffixMemory, SuffixProposer, draft_decode, greedy_decode,
                    suffix_decode)
from ladref.batched.drafts import Drafts
from ladref.batched.loop import decode_batch
from ladref.batched.source import BatchSource
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.batched.sources.rows import RowProposers, copy_for_rows, row_sources
from ladref.batched.sources.suffix import batched_suffix

pytestmark = pytest.mark.usefixtures("one_thread")


class Log:
    """Where every copy of a recording proposer writes its outcomes: one list per `begin`, in order
    (deep copies of a proposer share it)."""

    def __init__(self) -> None:
        self.calls: list[list] = []

    def __deepcopy__(self, memo: dict) -> "Log":
        return self


class Reversed(DraftSource):
    """Drafts the context's last k tokens reversed, and beside them its last token repeated (a branch),
    or nothing when the current token is a multiple of `skip`; records every outcome it learns."""

    name = "reversed"

    def __init__(self, k: int, log: Log, skip: int = 0, topk: int = 0, chain: int = 0) -> None:
        self.k, self.log, self.skip, self.topk, self.chain = k, log, skip, topk, chain
        self.seen: list = []

    def begin(self, prompt):
        self.seen = []
        self.log.calls.append(self.seen)

    def propose(self, context):
        if self.skip and context[-1] % self.skip == 0:
            return DraftTree.empty()
        paths = [list(context[-self.k:])[::-1], [context[-1]] * 2] + ([[context[-1]] * self.chain] if self.chain else [])
        return DraftTree.from_paths(paths, self.name)

    def learn(self, outcome):
        self.seen.append(outcome)


class Still:
    """A lookahead window that never moves: its (N-1, W) grid stays as given (nothing harvested)."""

    def __init__(self, grid: torch.Tensor) -> None:
        self.grid = grid

    def advance(self, fed, new_row):
        return None


class StillWindow(DraftSource):
    """A proposer bringing a `Still` window and drafting nothing (one prompt)."""

    name = "still"

    def __init__(self, grid: torch.Tensor) -> None:
        self.window = Still(grid)

    def begin(self, prompt):
        pass

    def propose(self, context):
        return DraftTree.empty()

    def learn(self, outcome):
        pass


class BatchStillWindow:
    """`StillWindow` as a batch source: every row's window the same fixed grid, no drafts."""

    name, depth, topk = "still", 0, 0

    def __init__(self, grid: torch.Tensor) -> None:
        self.window, self.base = (grid.shape[1], grid.shape[0] + 1), grid

    def begin(self, state):
        self.grid = self.base.expand(state.size, *self.base.shape).clone()

    def propose(self, state):
        empty = torch.zeros(state.size, 0, dtype=torch.long)
        return Drafts.of(empty, empty[0], empty.bool())

    def learn(self, state, outcome, part):
        pass

    def select(self, keep):
        self.grid = self.grid.index_select(0, keep)


def same_outcome(ours, theirs, labels: bool = True) -> None:
    """Two `StepOutcome` s are equal field by field (the tree's node names too, when `labels`)."""
    assert (ours.position, ours.tokens, ours.path, ours.root_pred, ours.window_tokens) == \
        (theirs.position, theirs.tokens, theirs.path, theirs.root_pred, theirs.window_tokens)
    assert ours.input_ids.tolist() == theirs.input_ids.tolist() and ours.node_preds.tolist() == theirs.node_preds.tolist()
    assert ours.tree.tokens.tolist() == theirs.tree.tokens.tolist() and ours.tree.parents.tolist() == theirs.tree.parents.tolist()
    assert not labels or ours.tree.sources == theirs.tree.sources
    assert ours.harvest is None and (ours.top is None) == (theirs.top is None)
    assert ours.top is None or ours.top.tolist() == theirs.top.tolist()


@st.composite
def batches(draw):
    """A model, rows of prompts and budgets, an EOS (or none), and the recording proposer's settings."""
    vocab = draw(st.sampled_from((8, 16)))
    rows = draw(st.integers(1, 4))
    lines = [draw(prompts(vocab, 1, 12)) for _ in range(rows)]
    budgets = [draw(st.integers(1, 20)) for _ in range(rows)]
    eos = draw(st.lists(st.integers(0, vocab - 1), max_size=1))
    options = dict(k=draw(st.integers(1, 4)), skip=draw(st.sampled_from((0, 3))), topk=draw(st.sampled_from((0, 2))))
    other = draw(st.sampled_from((None, "lookup", "window")))
    grid = torch.tensor(draw(st.lists(st.integers(0, vocab - 1), min_size=6, max_size=6))).view(2, 3)  # N = 3, W = 3
    return tiny_model(draw(architectures), vocab, draw(st.integers(0, 3))), lines, budgets, eos, options, other, grid


@settings(max_examples=12, deadline=None)
@given(batches())
def test_a_users_proposer_decodes_and_learns_as_in_the_one_prompt_loop(batch):
    model, lines, budgets, eos, options, other, grid = batch
    log, lookup = Log(), other == "lookup"
    sources = [RowProposers(Reversed(log=log, **options), vocab_size=model.config.vocab_size)]
    if other is not None:  # another batch source before it: its nodes come first in every tree, or its window
        sources.insert(0, BatchPromptLookup(3, 2, 1, 2) if lookup else BatchStillWindow(grid))
    result = decode_batch(model, lines, budgets, {"eos_token_id": eos}, "draft", sources)
    for prompt, budget, row, seen in zip(lines, budgets, result, log.calls):
        alone = Log()
        first = {None: [], "lookup": [PromptLookupProposer(3, 2, 1, 2)], "window": [StillWindow(grid)]}[other]
        one = draft_decode(model, prompt, budget, proposers=first + [Reversed(log=alone, **options)], eos_token_id=eos)
        assert row.token_ids == one.token_ids == greedy_decode(model, prompt, budget, eos_token_id=eos).token_ids
        assert (row.stats.steps, row.stats.accepted_per_step, row.stats.forward_tokens_per_step) == \
            (one.stats.steps, one.stats.accepted_per_step, one.stats.forward_tokens_per_step)
        assert row.stats.accepted_by_source == one.stats.accepted_by_source
        assert len(seen) == len(alone.calls[0]) == one.stats.steps
        for ours, theirs in zip(seen, alone.calls[0]):
            same_outcome(ours, theirs, labels=not lookup)
            if lookup:  # the other source's nodes are named by its index in the batch
                assert [s.replace("source 0", "prompt_lookup") for s in ours.tree.sources] == list(theirs.tree.sources)


def test_deep_and_repeated_drafts_are_cut_and_merged_and_stay_exact():
    model, log = tiny_model("llama", 8, 1), Log()

    class Repeated(Reversed):  # the same chain twice, side by side: not a trie
        def propose(self, context):
            return DraftTree.chains([list(context[-self.k:])] * 2, self.name)

    lines, budgets = [[1, 2, 3, 1, 2, 3], [4, 4, 4], [5]], [12, 9, 14]
    deep = RowProposers(Reversed(3, log, chain=6), max_depth=2)
    repeated = RowProposers(Repeated(3, Log()), max_depth=4)
    for source in (deep, repeated):
        result = decode_batch(model, lines, budgets, {"eos_token_id": []}, "draft", [source])
        assert [r.token_ids for r in result] == [greedy_decode(model, p, b).token_ids for p, b in zip(lines, budgets)]
    assert max(int(o.tree.depths.max()) for seen in log.calls for o in seen if len(o.tree)) == 2
    assert all(len(o.tree) <= 5 for seen in log.calls for o in seen)  # the 6-deep chain cut to its first 2 nodes


@settings(max_examples=6, deadline=None)
@given(st.lists(prompts(16, 1, 12), min_size=1, max_size=4), st.integers(1, 24), architectures)
def test_suffix_decoding_in_a_batch_is_greedy_and_fills_the_shared_memory(lines, budget, arch):
    model = tiny_model(arch, 16, 0)
    memory = SuffixMemory()
    proposer = SuffixProposer.for_model(model, memory=memory)
    result = decode_batch(model, lines, [budget] * len(lines), {"eos_token_id": []}, "suffix", [batched_suffix(proposer)])
    outputs = [r.token_ids for r in result]
    assert outputs == [greedy_decode(model, p, budget).token_ids for p in lines]
    records = [memory.records[key][0] for key in sorted(memory.records)]  # one record per row, opened in row order
    assert [record[: budget] for record in records] == outputs  # a row's last step may accept past its budget, as alone
    again = decode_batch(model, lines, [budget] * len(lines), {"eos_token_id": []}, "suffix", [batched_suffix(proposer)])
    assert [r.token_ids for r in again] == outputs and len(memory.records) == 2 * len(lines)  # drafted from the first call
    alone = batched_suffix(SuffixProposer())  # without a memory every row drafts as suffix decoding alone
    for prompt, row in zip(lines, decode_batch(model, lines, [budget] * len(lines), {"eos_token_id": []}, "suffix", [alone])):
        one = suffix_decode(model, prompt, budget)
        assert row.token_ids == one.token_ids
        assert row.stats.accepted_per_step == one.stats.accepted_per_step
        assert row.stats.accepted_by_source == one.stats.accepted_by_source


def test_each_row_copies_its_proposers_but_shares_a_suffix_memory():
    memory, log = SuffixMemory(), Log()
    rows = copy_for_rows([SuffixProposer(memory=memory), Reversed(2, log)], 3)
    assert len({id(r[0]) for r in rows}) == len({id(r[1]) for r in rows}) == 3
    assert all(r[0].memory is memory and r[1].log is log for r in rows)
    holder = Reversed(1, log)
    holder.memory = memory  # a user's proposer holding a memory: its copies share it too
    assert all(r[0].memory is memory for r in copy_for_rows([holder], 2))
    source = batched_suffix(SuffixProposer(max_depth=5))
    assert isinstance(source, BatchSource) and (source.name, source.depth, source.topk, source.window) == ("suffix", 5, 0, None)
    assert [s.name for s in row_sources([Reversed(1, log), SuffixProposer()])] == ["reversed", "suffix"]
    assert RowProposers([Reversed(1, log), SuffixProposer()]).name == "reversed+suffix"


def test_a_window_a_class_and_a_half_proposer_are_refused_when_built():
    with pytest.raises(ValueError, match="StillWindow.*'still'.*window of its own"):
        RowProposers([StillWindow(torch.zeros(2, 3, dtype=torch.long))])
    with pytest.raises(TypeError, match="Reversed is a class: pass an instance"):
        RowProposers([Reversed])
    with pytest.raises(TypeError, match="object does not implement the Proposer protocol"):
        RowProposers([object()])
    with pytest.raises(TypeError, match="proposer must be a SuffixProposer"):
        batched_suffix(Reversed(1, Log()))
    with pytest.raises(ValueError, match="vocabulary"):
        batched_suffix(SuffixProposer(memory=SuffixMemory(), vocab_size=8), vocab_size=16)


def test_a_token_outside_the_vocabulary_is_refused():
    class Outside(Reversed):
        def propose(self, context):
            return DraftTree.from_paths([[99]], self.name)

    with pytest.raises(ValueError, match=r"outside the model's vocabulary \[0, 16\)"):
        decode_batch(tiny_model("llama", 16, 0), [[1, 2]], [4], {"eos_token_id": []}, "draft",
                     [RowProposers(Outside(1, Log()), 4, 16)])


class BatchOps(TorchFunctionMode):
    """Within a source's propose and learn (``inside``), the torch functions applied to the batch's
    tensors (every tensor made outside them, and what is computed from those) and the reads of them."""

    READS = {"tolist", "item", "__int__", "__bool__", "__float__", "__index__"}

    def __init__(self) -> None:
        super().__init__()
        self.inside, self.marked, self.calls = None, {}, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        batch = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and id(t) in self.marked]
        if self.inside is None or batch:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.marked[id(t)] = t  # kept alive: ids stay unique
        if self.inside is not None and batch:
            self.calls[-1][1 + (getattr(func, "__name__", "") in self.READS)] += 1
        return out


class Counted(RowProposers):
    """`RowProposers` whose propose and learn count their ops on the batch's tensors (`BatchOps`)."""

    def __init__(self, ops: BatchOps, *args) -> None:
        super().__init__(*args)
        self.ops = ops

    def counted(self, name, method, *args):
        self.ops.inside = name
        self.ops.calls.append([name, 0, 0])
        try:
            return method(*args)
        finally:
            self.ops.inside = None

    def propose(self, state):
        return self.counted("propose", super().propose, state)

    def learn(self, state, outcome, part):
        return self.counted("learn", super().learn, state, outcome, part)


@pytest.mark.parametrize("topk", [0, 2])
def test_one_read_a_step_and_the_same_ops_for_any_batch(topk):
    model = tiny_model("llama", 16, 0)
    counts = {}
    for rows in (1, 8):
        with BatchOps() as ops:
            decode_batch(model, [[1, 2, 3, 1, 2]] * rows, [10] * rows, {"eos_token_id": []}, "draft",
                         [Counted(ops, Reversed(3, Log(), topk=topk))])
        counts[rows] = {(name, n, reads) for name, n, reads in ops.calls}
    assert counts[1] == counts[8]
    assert {(name, reads) for name, _, reads in counts[1]} == {("propose", 0), ("learn", 1)}
