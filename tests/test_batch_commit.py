"""A batch's padded KV cache: each row's slots marked in a bias, a pass at the frontier, and the commit of each row's path."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from ladref import greedy_decode, jacobi_decode
from ladref.batched.cache import BatchCache, ragged_commit_plan
from ladref.facts import check_model
from ladref.kernels import sdpa_backends
from ladref.runner import ModelRunner

pytestmark = [pytest.mark.task1_6, pytest.mark.usefixtures("one_thread")]


def new_cache(model: torch.nn.Module, rows: int) -> BatchCache:
    facts = check_model(model)
    return BatchCache(model, facts, sdpa_backends("auto", facts.device, facts.attention), rows)


@st.composite
def steps(draw):
    """(frontier, width, entries, counts): B rows, each keeping its current token's entry 0, then distinct
    entries of its step in a path's order; past its count, anything in [0, width)."""
    rows, k = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    width = k + draw(st.integers(0, 3))
    entries, counts = [], []
    for _ in range(rows):
        count = draw(st.integers(1, k))
        path = sorted(draw(st.permutations(range(1, width)))[: count - 1])
        entries.append([0, *path, *draw(st.lists(st.integers(0, width - 1), min_size=k - count, max_size=k - count))])
        counts.append(count)
    return draw(st.integers(0, 20)), width, entries, counts


def test_a_plan_moves_each_rows_path_to_the_slots_right_after_its_current_token():
    """A worked example: at frontier 10, row 0 keeps its entries 0, 3, 1; row 1 its current token alone; row 2 its
    whole step. Past a row's count, a column moves its slot onto itself."""
    entries = torch.tensor([[0, 3, 1, 0], [0, 2, 2, 1], [0, 1, 2, 3]])  # past a row's count: anything
    sources, targets = ragged_commit_plan(10, entries, torch.tensor([3, 1, 4]))
    assert sources.dtype == targets.dtype == torch.long
    assert sources.tolist() == [[10, 13, 11, 13], [10, 11, 12, 13], [10, 11, 12, 13]]
    assert targets.tolist() == [[10, 11, 12, 13]] * 3


@given(steps())
def test_applying_a_plan_leaves_each_row_its_path_after_the_frontier_and_every_other_slot_as_it_was(step):
    """Any step (Hypothesis): (B, K) long plans; after the moves (every entry read before any is written), row b's
    slots frontier .. frontier + count - 1 hold its kept entries in path order, and its other slots are unchanged."""
    frontier, width, entries, counts = step
    given_entries, given_counts = torch.tensor(entries), torch.tensor(counts)
    sources, targets = ragged_commit_plan(frontier, given_entries, given_counts)
    assert sources.shape == targets.shape == given_entries.shape and sources.dtype == targets.dtype == torch.long
    assert given_entries.tolist() == entries and given_counts.tolist() == counts  # the arguments are left as they were
    cache = torch.arange(len(entries))[:, None] * 1000 + torch.arange(frontier + width)  # (B, T + Q): row * 1000 + slot
    rows = torch.arange(len(entries))[:, None]
    cache[rows, targets] = cache[rows, sources]
    for b, (kept, count) in enumerate(zip(entries, counts)):
        expected = [b * 1000 + s for s in range(frontier + width)]
        expected[frontier : frontier + count] = [b * 1000 + frontier + i for i in kept[:count]]
        assert cache[b].tolist() == expected


def test_a_commit_moves_every_layers_keys_and_values_and_marks_the_kept_slots():
    """Every layer's keys and values move by the plan; the kept slots are marked (bias 0), the rest of the step
    stays hidden, the holes before the frontier stay holes, and the frontier does not move (`advance` moves it)."""
    batch, rows, t, q = new_cache(tiny_model("llama", 16, 0), 2), 2, 4, 5
    names = (torch.arange(rows, dtype=torch.float64)[:, None] * 1000 + torch.arange(t + q))[:, None, :, None]  # (B, 1, T + Q, 1)
    with torch.inference_mode():
        for i in range(len(batch.cache.layers)):
            batch.cache.update(names.expand(rows, 2, t + q, 3).clone(), -names.expand(rows, 2, t + q, 3), i)
        batch.frontier = t
        batch._room(t + q)
        batch.bias[0, :t] = 0  # row 0 holds slots 0..3
        batch.bias[1, 2:t] = 0  # row 1 holds slots 2, 3 (slots 0, 1: a hole)
        batch.commit(torch.tensor([[0, 4, 2], [0, 3, 3]]), torch.tensor([3, 1]))
    kept = [[0, 1, 2, 3, 4, 8, 6, 7, 8], [1000 + s for s in range(t + q)]]
    for layer in batch.cache.layers:
        assert layer.keys[:, :, :, 0].tolist() == [[row] * 2 for row in kept]
        assert (-layer.values[:, :, :, 2]).tolist() == [[row] * 2 for row in kept]
    assert [(row == 0).nonzero().flatten().tolist() for row in batch.bias] == [[0, 1, 2, 3, 4, 5, 6], [2, 3, 4]]
    assert batch.frontier == t


class Operations(TorchDispatchMode):
    """The names of the torch operations run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def meta_commit(rows: int) -> list[str]:
    """The operations of a commit into a cache whose keys, values and bias are meta tensors (shapes, no values)."""
    batch = new_cache(tiny_model("llama", 16, 0), rows)
    meta = dict(dtype=torch.float64, device="meta")
    with torch.inference_mode():
        for i in range(len(batch.cache.layers)):
            batch.cache.update(torch.zeros(rows, 2, 9, 3, **meta), torch.zeros(rows, 2, 9, 3, **meta), i)
        batch.frontier = 4
        batch._room(9)
        batch.bias = batch.bias.to("meta")
        with Operations() as seen:
            batch.commit(torch.zeros(rows, 3, dtype=torch.long, device="meta"), torch.ones(rows, dtype=torch.long, device="meta"))
    return seen.names


def test_the_plan_and_the_commit_read_nothing_back_and_do_not_loop_over_rows():
    """Both run on tensors of torch's meta device (shapes, no values: reading one back fails) and run the same
    torch operations for 2 rows as for 6."""
    seen = []
    for rows in (2, 6):
        with Operations() as plan:
            sources, targets = ragged_commit_plan(4, torch.zeros(rows, 3, dtype=torch.long, device="meta"),
                                                  torch.ones(rows, dtype=torch.long, device="meta"))
        assert sources.shape == targets.shape == (rows, 3) and sources.device.type == "meta"
        seen.append((plan.names, meta_commit(rows)))
    assert seen[0] == seen[1]


def committed_logits(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    """(V,) the logits after `tokens` in a plain causal pass."""
    return ModelRunner(model).forward(torch.tensor(tokens))[-1]


def cached_entries_match(batch: BatchCache, model: torch.nn.Module, committed: list[list[int]]) -> None:
    """Each row's cache, at its marked slots, holds what a plain forward over its committed tokens holds."""
    for b, tokens in enumerate(committed):
        slots = (batch.bias[b] == 0).nonzero().flatten()
        assert len(slots) == len(tokens) and slots.max() < batch.frontier
        alone = ModelRunner(model)
        alone.forward(torch.tensor(tokens))
        for ours, theirs in zip(batch.cache.layers, alone.cache.layers):
            assert torch.allclose(ours.keys[b][:, slots], theirs.keys[0], atol=1e-9)
            assert torch.allclose(ours.values[b][:, slots], theirs.values[0], atol=1e-9)


def test_a_one_token_pass_sees_each_rows_own_slots_and_marks_its_slot_at_once():
    """Rows of different lengths (one prompt of a single token): a pass of one token a row, without a step mask,
    gives each row the logits of a plain pass over its own tokens, and marks the slot it wrote as committed."""
    model = tiny_model("gpt2", 32, 2)
    prompts = [[3, 1, 4, 1, 5], [9], [2, 6]]
    batch = new_cache(model, len(prompts))
    with torch.inference_mode():
        batch.prefill([torch.tensor(p) for p in prompts], "auto")
        t = batch.frontier
        logits = batch.forward(torch.tensor([[p[-1]] for p in prompts]), torch.tensor([[len(p) - 1] for p in prompts]), None,
                               torch.zeros(1, dtype=torch.long))
        assert logits.shape == (3, 1, 32) and (batch.bias[:, t] == 0).all()
        for b, prompt in enumerate(prompts):
            assert torch.allclose(logits[b, 0], committed_logits(model, prompt), atol=1e-9)
        batch.frontier += 1  # the token's entry is committed where the pass wrote it
    cached_entries_match(batch, model, prompts)


def two_branches(current: int, first: list[int], second: list[int], width: int) -> tuple[list[int], list[int], torch.Tensor]:
    """A step of `width` entries: the current token, then two drafted chains after it, then padding (a node under the
    current token). Returns its tokens, each entry's depth and its (Q, Q) mask (an entry sees its root path)."""
    a, q = 1 + len(first), 1 + len(first) + len(second)
    allowed = torch.eye(width, dtype=torch.bool)
    allowed[:, 0] = True
    allowed[1:a, 1:a] = torch.ones(a - 1, a - 1, dtype=torch.bool).tril()
    allowed[a:q, a:q] = torch.ones(q - a, q - a, dtype=torch.bool).tril()
    depths = [0, *range(1, a), *range(1, q - a + 1)] + [1] * (width - q)
    return [current, *first, *second] + [0] * (width - q), depths, allowed


def test_rows_of_different_lengths_each_keep_their_own_branch_of_a_step():
    """Two drafting steps of three rows: each row's pass sees its own slots (holes hidden) and its root path, with
    positions by depth; each keeps its own path. Every node's logits are those of a plain pass over the row's
    committed tokens and its path, and each row's cache at its marked slots is that of a plain pass over its tokens."""
    model = tiny_model("qwen2", 16, 1)
    prompts = [[3, 1, 4, 1, 5], [9], [2, 6]]
    batch = new_cache(model, len(prompts))
    committed = [p[:-1] for p in prompts]
    currents = [p[-1] for p in prompts]
    plans = [  # per step, per row: the two chains and the entries kept (the current token's 0 first)
        [([7, 8], [9, 10, 11], [0, 3, 4]), ([13], [14, 15], [0, 1]), ([1], [2], [0])],
        [([4], [5, 6], [0, 2, 3]), ([7, 7, 7], [], [0, 1, 2, 3]), ([3, 2], [1], [0, 3])],
    ]
    with torch.inference_mode():
        batch.prefill([torch.tensor(p) for p in prompts], "auto")
        for step in plans:
            width, k = 6, 4
            rows = [two_branches(c, first, second, width) for c, (first, second, _) in zip(currents, step)]
            ids = torch.tensor([tokens for tokens, _, _ in rows])
            positions = torch.tensor([[len(c) + d for d in depths] for c, (_, depths, _) in zip(committed, rows)])
            logits = batch.forward(ids, positions, torch.stack([allowed for _, _, allowed in rows]), torch.arange(width))
            for b, (tokens, _, allowed) in enumerate(rows):
                for i in range(1 + len(step[b][0]) + len(step[b][1])):  # each real entry: its root path, alone
                    path = [tokens[j] for j in allowed[i].nonzero().flatten().tolist()]
                    assert torch.allclose(logits[b, i], committed_logits(model, committed[b] + path), atol=1e-9)
            kept = [entries + [0] * (k - len(entries)) for _, _, entries in step]
            counts = torch.tensor([len(entries) for _, _, entries in step])
            batch.commit(torch.tensor(kept), counts)
            batch.advance(int(counts.max()))
            for b, (_, _, entries) in enumerate(step):
                committed[b] += [rows[b][0][i] for i in entries]
                currents[b] = (committed[b][-1] + 1) % 16  # the next step's current token (any token will do here)
            cached_entries_match(batch, model, committed)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_batch_decodes_each_row_as_the_one_prompt_decoder_does(arch):
    """Greedy decoding (one-token passes) and Jacobi decoding (drafting passes, ragged commits) of a batch of prompts
    of different lengths: every row's tokens are those of greedy decoding of its prompt alone."""
    model = tiny_model(arch, 16, 0)
    prompts, budgets = [[1, 2, 3, 4, 5], [7], [3, 3, 9, 1], [4] * 7], [9, 6, 12, 15]
    alone = [greedy_decode(model, p, n, eos_token_id=[3]).token_ids for p, n in zip(prompts, budgets)]
    assert [row.token_ids for row in greedy_decode(model, prompts, budgets, eos_token_id=[3])] == alone
    assert [row.token_ids for row in jacobi_decode(model, prompts, budgets, block_size=3, eos_token_id=[3])] == alone
