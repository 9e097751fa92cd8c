"""Token Recycling in a batch against the one-prompt `RecyclingProposer`: proposals, learning, decoding, op counts."""

from __future__ import annotations

import copy
import random
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from ladref import DraftTree, greedy_decode
from ladref.batched.loop import decode_batch
from ladref.batched.sources.recycling import BatchRecycling
from ladref.batched.state import BatchState
from ladref.proposer import StepOutcome
from ladref.sources.recycling import RecyclingProposer, TreeTemplate
from ladref.decoders.methods import recycling_decode

pytestmark = pytest.mark.usefixtures("one_thread")


def random_template(rng: random.Random, size: int, topk: int, depth: int) -> TreeTemplate:
    """At most `size` rank paths in a random topological order (depths mixed, not level by level)."""
    paths: list[tuple[int, ...]] = []
    for _ in range(4 * size):  # a narrow, shallow shape has fewer paths than `size`
        parent = rng.choice([(), *[p for p in paths if len(p) < depth]])
        path = parent + (rng.randrange(topk),)
        if path not in paths and len(paths) < size:
            paths.append(path)
    return TreeTemplate(tuple(paths))


def random_matrix(rng: random.Random, vocab: int, k: int) -> torch.Tensor:
    """(V, k) long: each token's row unknown (-1) or k distinct successors, as top-k rows are."""
    rows = [[-1] * k if rng.random() < 0.3 else rng.sample(range(vocab), k) for _ in range(vocab)]
    return torch.tensor(rows, dtype=torch.long)


def states(currents: list[int]) -> BatchState:
    """A batch whose rows' current tokens are `currents` (one-token prompts)."""
    return BatchState.start([torch.tensor([c]) for c in currents], [4] * len(currents), frozenset(), 1, torch.device("cpu"))


def started(source: BatchRecycling, matrices: list[torch.Tensor]) -> BatchRecycling:
    """`source` begun on len(matrices) rows, row b's matrix set to the reference form `matrices[b]`."""
    source.begin(states([0] * len(matrices)))
    v = source.vocab_size
    for b, matrix in enumerate(matrices):
        source.adjacency[b, :v] = torch.where(matrix < 0, v, matrix)
    return source


def reference(template: TreeTemplate, matrix: torch.Tensor) -> RecyclingProposer:
    proposer = RecyclingProposer(matrix.shape[0], template, matrix.shape[1], warm=True)
    proposer.adjacency = matrix.clone()
    return proposer


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_proposals_are_the_reference_trees_row_by_row(seed):
    rng = random.Random(seed)
    vocab, rows, k = rng.choice((4, 8, 16)), rng.randint(1, 5), rng.randint(1, 4)
    template = random_template(rng, rng.randint(1, 12), min(k, vocab), rng.randint(1, 4))
    matrices = [random_matrix(rng, vocab, k) for _ in range(rows)]
    source = started(BatchRecycling(vocab, template, k), matrices)
    currents = [rng.randrange(vocab) for _ in range(rows)]
    drafts = source.propose(states(currents))
    assert drafts.trie and drafts.parents.tolist() == source.parents.tolist()
    assert ((drafts.tokens >= 0) & (drafts.tokens < vocab)).all() and (drafts.tokens[~drafts.valid] == 0).all()
    for b in range(rows):
        tree = reference(template, matrices[b]).propose([currents[b]])
        slots = drafts.valid[b].nonzero().flatten().tolist()
        new = {s: i for i, s in enumerate(slots)}
        assert drafts.tokens[b, slots].tolist() == tree.tokens.tolist()
        assert [new.get(int(drafts.parents[s]), -1) for s in slots] == tree.parents.tolist()
        assert all(int(drafts.parents[s]) < 0 or int(drafts.parents[s]) in new for s in slots)  # a valid node's parent is valid


def outcome(ids: torch.Tensor, top: torch.Tensor, length: int, window: torch.Tensor | None, valid: torch.Tensor):
    """The fields of `ladref.batched.source.Outcome` that `learn` reads."""
    return SimpleNamespace(ids=ids, top=top, length=length, window=window, fed=SimpleNamespace(valid=valid))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_learning_is_the_reference_learning_row_by_row(seed):
    rng = random.Random(seed)
    vocab, rows, k, extra = rng.choice((3, 5, 16)), rng.randint(1, 5), rng.randint(1, 3), rng.randint(0, 2)
    length, width = rng.choice((1, rng.randint(2, 6))), rng.randint(0, 8)  # the window's part, the nodes'
    q = length + width
    matrices = [random_matrix(rng, vocab, k) if vocab >= k else torch.full((vocab, k), -1) for _ in range(rows)]
    source = started(BatchRecycling(vocab, TreeTemplate(((0,),)), k), matrices)
    ids = torch.randint(0, vocab, (rows, q))  # small vocabularies: tokens fed several times a step
    top = torch.randint(0, vocab, (rows, q, k + extra))  # a wider top-k asked by another source: its first k count
    window = None if length == 1 else torch.rand(rows) < 0.5
    valid = torch.rand(rows, width) < 0.6  # padding where False
    source.learn(None, outcome(ids, top, length, window, valid), slice(0, 1))
    for b in range(rows):
        fed = torch.cat([torch.tensor([True]), (window[b] if window is not None else torch.tensor(True)).expand(length - 1), valid[b]])
        proposer = reference(TreeTemplate(((0,),)), matrices[b])
        proposer.learn(StepOutcome(0, ids[b][fed], DraftTree.empty(), [], [], 0, torch.empty(0, dtype=torch.long), top=top[b][fed]))
        assert source.matrix(b).tolist() == proposer.adjacency.tolist()
    assert (source.adjacency[:, vocab] == vocab).all()  # the unknown row stays unknown


def test_the_scratch_row_keeps_unfed_positions_out_of_every_matrix():
    source = started(BatchRecycling(4, TreeTemplate(((0,),)), 1), [torch.full((4, 1), -1)] * 2)
    ids = torch.tensor([[1, 2, 2, 3], [1, 1, 2, 0]])
    top = torch.tensor([[[0], [1], [2], [3]], [[3], [2], [1], [0]]])
    source.learn(None, outcome(ids, top, 1, None, torch.tensor([[True, True, False], [True, False, False]])), slice(0, 1))
    assert source.matrix(0).flatten().tolist() == [-1, 0, 2, -1]  # token 2: its last fed position; token 3: padding
    assert source.matrix(1).flatten().tolist() == [-1, 2, -1, -1]  # token 1 fed twice: the second; 2 and 0 not fed


@st.composite
def templates(draw) -> TreeTemplate:
    """A random template of up to 16 nodes, ranks below 3, depth up to 4 (`random_template`)."""
    return random_template(random.Random(draw(st.integers(0, 10_000))), draw(st.integers(1, 16)), 3, draw(st.integers(1, 4)))


def assert_rows_match(model, rows, budgets, eos, result, one):
    """Every row's text is greedy's, and its steps are `one(prompt, budget)`'s, step by step."""
    for prompt, budget, row in zip(rows, budgets, result):
        single = one(prompt, budget)
        assert row.token_ids == single.token_ids == greedy_decode(model, prompt, budget, eos_token_id=eos).token_ids
        assert row.stats.steps == single.stats.steps
        assert row.stats.accepted_per_step == single.stats.accepted_per_step
        assert row.stats.forward_tokens_per_step == single.stats.forward_tokens_per_step
        assert row.stats.accepted_by_source == single.stats.accepted_by_source


@settings(max_examples=12, deadline=None)
@given(architectures, st.sampled_from((8, 16)), st.integers(0, 2), templates(), st.data())
def test_a_batch_decodes_as_recycling_decode_row_by_row(arch, vocab, seed, template, data):
    model = tiny_model(arch, vocab, seed)
    rows = data.draw(st.lists(prompts(vocab, max_size=8), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 16), min_size=len(rows), max_size=len(rows)))
    eos = data.draw(st.sampled_from(([], [1])))
    result = decode_batch(model, rows, budgets, {"eos_token_id": eos}, "recycling", [BatchRecycling(vocab, template)])
    assert_rows_match(model, rows, budgets, eos, result,
                      lambda p, n: recycling_decode(model, p, n, template=template, eos_token_id=eos))


def test_the_default_template_decodes_exactly():
    model, template = tiny_model("llama", 16, 0), TreeTemplate.best_first()
    rows, budgets = [[1, 2, 3], [4, 4, 4, 4], [5, 6, 5, 6, 5, 6, 5], [7]], [20, 12, 30, 5]
    result = decode_batch(model, rows, budgets, {"eos_token_id": [3]}, "recycling", [BatchRecycling(16)])
    assert_rows_match(model, rows, budgets, [3], result,
                      lambda p, n: recycling_decode(model, p, n, template=template, eos_token_id=[3]))


def test_a_warm_proposer_starts_every_row_and_is_left_as_it_was():
    model, template = tiny_model("qwen2", 16, 1), TreeTemplate(((0,), (0, 0), (1,), (0, 0, 0)))
    warm = RecyclingProposer(16, template, warm=True)
    recycling_decode(model, [3, 1, 4, 1, 5], 12, proposer=warm)
    before = warm.adjacency.clone()
    source = BatchRecycling.from_proposer(warm)
    assert (source.template, source.topk, source.start) == (template, warm.topk, warm)
    rows, budgets = [[9, 2, 6], [5, 3, 5, 8, 9], [7]], [10, 14, 6]
    result = decode_batch(model, rows, budgets, {"eos_token_id": []}, "recycling", [source])
    assert torch.equal(warm.adjacency, before)
    assert_rows_match(model, rows, budgets, [], result,
                      lambda p, n: recycling_decode(model, p, n, proposer=copy.deepcopy(warm), eos_token_id=[]))
    cold = BatchRecycling.from_proposer(RecyclingProposer(16, template))
    assert cold.start is None


class Counting(TorchDispatchMode):
    """Counts the aten ops dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def counted_step(rows: int, template: TreeTemplate) -> tuple[Counter, Counter]:
    """The ops of one `propose` and one `learn` (every position fed, a window fed by half the rows) on `rows` rows."""
    vocab, k = 64, template.topk
    source = started(BatchRecycling(vocab, template), [random_matrix(random.Random(b), vocab, k) for b in range(rows)])
    state = states([b % vocab for b in range(rows)])
    ids, top = torch.randint(0, vocab, (rows, 4 + 10)), torch.randint(0, vocab, (rows, 14, k))
    step = outcome(ids, top, 4, torch.arange(rows) % 2 == 0, torch.ones(rows, 10, dtype=torch.bool))
    with torch.inference_mode():
        source.propose(state)  # the first call moves nothing, but warms up
        with Counting() as proposing:
            source.propose(state)
        with Counting() as learning:
            source.learn(state, step, slice(0, len(template.paths)))
    return proposing.ops, learning.ops


@pytest.mark.parametrize("template", [TreeTemplate.best_first(), TreeTemplate(((0,), (1,), (0, 0)))], ids=["default", "small"])
def test_propose_and_learn_take_as_many_ops_for_one_row_as_for_eight(template):
    one, eight = counted_step(1, template), counted_step(8, template)
    assert one == eight
    reads = {"aten._local_scalar_dense", "aten.nonzero", "aten.item", "aten.unique", "aten._unique2"}
    assert not reads & (set(one[0]) | set(one[1]))


class CountedRecycling(BatchRecycling):
    """`BatchRecycling` recording the aten ops of each `propose` and `learn` call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, Counter]] = []

    def propose(self, state):
        with Counting() as mode:
            drafts = super().propose(state)
        self.calls.append(("propose", mode.ops))
        return drafts

    def learn(self, state, outcome, part):
        with Counting() as mode:
            super().learn(state, outcome, part)
        self.calls.append(("learn", mode.ops))


def test_a_decode_step_proposes_and_learns_with_as_many_ops_for_one_row_as_for_eight():
    model = tiny_model("gpt2", 16, 0)
    counted = []
    for rows in (1, 8):
        source = CountedRecycling(16)
        decode_batch(model, [[1, 2, 1, 2, 3]] * rows, [12] * rows, {"eos_token_id": []}, "recycling", [source])
        counted.append(source.calls)
    assert counted[0] == counted[1] and len(counted[0]) > 4
    assert not any(op in ops for _, ops in counted[0] for op in ("aten._local_scalar_dense", "aten.nonzero", "aten.item"))


def test_wrong_arguments_are_named():
    with pytest.raises(TypeError, match="template"):
        BatchRecycling(16, template=[(0,)])
    with pytest.raises(ValueError, match="topk >= 3"):
        BatchRecycling(16, TreeTemplate(((2,),)), topk=2)
    with pytest.raises(ValueError, match="vocab_size"):
        BatchRecycling(0)
    with pytest.raises(TypeError, match="RecyclingProposer"):
        BatchRecycling.from_proposer(BatchRecycling(16))


def test_a_batch_of_one_row_leaves_a_warm_matrix_as_the_one_prompt_loop_does():
    """One prompt after another keeps a warm proposer's matrix, through the engine as through the
    reference loop; a batch of several rows leaves it as it was."""
    from ladref import draft_decode

    model = tiny_model("llama", 16, 0)
    reference, engine = (RecyclingProposer.for_model(model, warm=True) for _ in range(2))
    for prompt in ([1, 2, 3, 4], [5, 1, 2]):
        draft_decode(model, prompt, 20, proposers=[reference], eos_token_id=[])  # one prompt: the reference loop
        draft_decode(model, [prompt], 20, proposers=[engine], eos_token_id=[])  # a batch of one: the engine
    assert bool((reference.adjacency >= 0).any()) and torch.equal(engine.adjacency, reference.adjacency)
    before = engine.adjacency.clone()
    draft_decode(model, [[1, 2, 3, 4], [5, 1, 2]], 20, proposers=[engine], eos_token_id=[])
    assert torch.equal(engine.adjacency, before)
