"""The batched step's building blocks against the one-prompt ones: merging, the fed nodes, verification, the commit."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import tiny_model

from ladref import DraftTree, greedy_decode, jacobi_decode
from ladref.batched.cache import BatchCache, ragged_commit_plan
from ladref.batched.drafts import Drafts, ancestor_table, compact, merge
from ladref.batched.loop import decode_batch
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.verify import verify_greedy as batch_verify
from ladref.facts import check_model
from ladref.kernels import sdpa_backends
from ladref.runner import ModelRunner
from ladref.verify import verify_greedy

pytestmark = pytest.mark.usefixtures("one_thread")


def random_tree(rng: random.Random, size: int, vocab: int) -> tuple[list[int], list[int]]:
    """(tokens, parents) of a random tree in topological order (siblings may repeat a token)."""
    parents = [rng.choice([-1, *range(i)]) if i else -1 for i in range(size)]
    return [rng.randrange(vocab) for _ in range(size)], parents


def padded(trees: list[tuple[list[int], list[int]]], width: int) -> Drafts:
    """Every row's tree in `width` slots, the rest invalid (token 0, under the root)."""
    tokens = torch.zeros(len(trees), width, dtype=torch.long)
    parents = torch.full((len(trees), width), -1, dtype=torch.long)
    valid = torch.zeros(len(trees), width, dtype=torch.bool)
    for b, (t, p) in enumerate(trees):
        tokens[b, : len(t)], parents[b, : len(p)], valid[b, : len(t)] = torch.tensor(t), torch.tensor(p, dtype=torch.long), True
    return Drafts(tokens, parents, valid, torch.zeros(width, dtype=torch.long), torch.zeros(len(trees), 1, dtype=torch.long))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_merging_gives_every_rows_trie_and_ancestors(seed):
    rng = random.Random(seed)
    trees = [random_tree(rng, rng.randint(0, 9), 3) for _ in range(rng.randint(1, 4))]
    drafts = padded(trees, 10)
    merged = merge(drafts, ancestor_table(drafts.parents, 10))
    for b, (tokens, parents) in enumerate(trees):
        tree = DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long), ("s",) * len(tokens))
        trie = DraftTree.from_paths([tree.path_tokens(i) for i in range(len(tree))], "s")
        kept = merged.kept[b].nonzero().flatten().tolist()
        assert sorted(tuple(tree.path_tokens(i)) for i in kept) == sorted(tuple(trie.path_tokens(i)) for i in range(len(trie)))
        for i in range(len(tokens)):  # a node merges into the kept node of its path; its ancestors are those of that path
            assert tree.path_tokens(int(merged.canonical[b, i])) == tree.path_tokens(i)
            above = [j for j in kept if merged.ancestors[b, merged.canonical[b, i], j]]
            assert sorted(tuple(tree.path_tokens(j)) for j in above) == [tuple(tree.path_tokens(i)[:d]) for d in range(1, len(tree.path(i)) + 1)]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_batched_verification_accepts_what_the_walk_accepts(seed):
    rng = random.Random(seed)
    rows, vocab = rng.randint(1, 4), 3
    trees = [random_tree(rng, rng.randint(0, 8), vocab) for _ in range(rows)]
    drafts = padded(trees, 8)
    merged = merge(drafts, ancestor_table(drafts.parents, 8))
    width = int(merged.kept.sum(-1).max())
    fed = compact(merged, merged.kept, width)
    root, preds = torch.randint(0, vocab, (rows,)), torch.randint(0, vocab, (rows, width))
    verdict = batch_verify(root, preds, fed, 1, 8)
    for b in range(rows):
        nodes = fed.node[b][fed.valid[b]].tolist()
        trie = DraftTree(fed.tokens[b, : len(nodes)], torch.tensor([
            next((k for k in range(len(nodes)) if fed.ancestors[b, i, k] and fed.depth[b, k] == fed.depth[b, i] - 1), -1)
            for i in range(len(nodes))], dtype=torch.long), ("s",) * len(nodes))
        one = verify_greedy(trie, int(root[b]), preds[b, : len(nodes)])
        count = int(verdict.count[b])
        assert verdict.tokens[b, :count].tolist() == one.tokens.tolist()
        assert verdict.entries[b, 1:count].tolist() == [1 + i for i in one.path]


def test_a_commit_plan_keeps_each_rows_path_and_moves_nothing_onto_a_kept_entry():
    entries = torch.tensor([[0, 3, 1, 0], [0, 0, 0, 0], [0, 1, 2, 3]])
    sources, targets = ragged_commit_plan(10, entries, torch.tensor([3, 1, 4]))
    assert sources.tolist() == [[10, 13, 11, 13], [10, 11, 12, 13], [10, 11, 12, 13]]
    assert targets.tolist() == [[10, 11, 12, 13]] * 3
    cache = torch.arange(3 * 14).view(3, 14).clone()
    rows = torch.arange(3)[:, None]
    cache[rows, targets] = cache[rows, sources]
    assert cache[0, 10:13].tolist() == [10, 13, 11] and cache[1, 10] == 24 and cache[2, 10:14].tolist() == [38, 39, 40, 41]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_the_cache_holds_what_a_plain_pass_over_each_rows_committed_tokens_holds(arch):
    model = tiny_model(arch, 16, 2)
    facts, rng = check_model(model), random.Random(3)
    prompts = [torch.tensor([rng.randrange(16) for _ in range(n)]) for n in (5, 1, 3)]
    cache = BatchCache(model, facts, sdpa_backends("auto", facts.device, facts.attention), len(prompts))
    committed = [p[:-1].tolist() for p in prompts]
    with torch.inference_mode():
        cache.prefill(prompts, "auto")
        for _ in range(4):  # steps of random chains; each row keeps a random prefix of its chain
            q = rng.randint(1, 4)
            ids = torch.randint(0, 16, (3, q))
            positions = torch.tensor([len(c) for c in committed])[:, None] + torch.arange(q)
            cache.forward(ids, positions, torch.ones(3, q, q, dtype=torch.bool).tril(), torch.zeros(1, dtype=torch.long))
            counts = torch.tensor([rng.randint(1, q) for _ in range(3)])
            cache.commit(torch.arange(q).expand(3, q), counts)
            cache.advance(int(counts.max()))
            for b in range(3):
                committed[b] += ids[b, : counts[b]].tolist()
        for b, tokens in enumerate(committed):
            alone = ModelRunner(model)
            alone.forward(torch.tensor(tokens))
            slots = (cache.bias[b, : cache.frontier] == 0).nonzero().flatten()
            for ours, theirs in zip(cache.cache.layers, alone.cache.layers):
                assert torch.allclose(ours.keys[b][:, slots], theirs.keys[0], atol=1e-12)
                assert torch.allclose(ours.values[b][:, slots], theirs.values[0], atol=1e-12)


def test_jacobi_in_a_batch_is_the_one_prompt_decoder_row_by_row():
    model = tiny_model("qwen2", 16, 1)
    prompts, budgets = [[1, 2, 3, 4, 5], [7], [3, 3, 9, 1], [4] * 7], [10, 6, 12, 20]
    result = decode_batch(model, prompts, budgets, {"eos_token_id": [3]}, "jacobi", [BatchJacobi(3)])
    for prompt, budget, row in zip(prompts, budgets, result):
        one = jacobi_decode(model, prompt, budget, block_size=3, eos_token_id=[3])
        assert row.token_ids == one.token_ids == greedy_decode(model, prompt, budget, eos_token_id=[3]).token_ids
        assert row.stats.accepted_per_step == one.stats.accepted_per_step
        assert row.stats.forward_tokens_per_step == one.stats.forward_tokens_per_step
