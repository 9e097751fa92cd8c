"""Hidden tests of task 1.5: tries grown by `extend` and their ancestor masks equal the reference's.

Every tree a test starts from is built with the `DraftTree` constructor from recorded tokens and
parents, so a case tests the submitted `extend` or `ancestors` alone.
"""

from __future__ import annotations

import random

import pytest
import torch

from ladref.tree import DraftTree

pytestmark = pytest.mark.task1_5

VOCAB = 4  # few tokens, so that paths share prefixes often


def state(tree: DraftTree) -> dict:
    return {"tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(), "sources": list(tree.sources)}


def build(recorded: dict) -> DraftTree:
    return DraftTree(torch.tensor(recorded["tokens"], dtype=torch.long), torch.tensor(recorded["parents"], dtype=torch.long),
                     tuple(recorded["sources"]))


def random_paths(rng: random.Random, rectangular: bool = False) -> list[list[int]]:
    """0..6 paths of 0..5 tokens (one length for all when `rectangular`)."""
    length = rng.randint(1, 5)
    return [[rng.randrange(VOCAB) for _ in range(length if rectangular else rng.randint(0, 5))] for _ in range(rng.randint(0, 6))]


def as_kind(paths: list[list[int]], kind: str):
    """The paths as given to `extend`: lists, tuples, or a (g, d) tensor (rows of 0-d tensors)."""
    if kind == "tuple":
        return tuple(tuple(p) for p in paths)
    if kind == "tensor":
        return torch.tensor(paths, dtype=torch.long) if paths else torch.empty(0, 1, dtype=torch.long)
    return [list(p) for p in paths]


def make_extend_case(seed: int) -> dict:
    """A trie (grown by the reference), then 1..3 calls of extend with other sources."""
    rng = random.Random(seed)
    base = DraftTree.empty().extend(random_paths(rng), "base") if seed % 4 else DraftTree.empty()
    calls = []
    for k in range(rng.randint(1, 3)):
        kind = ("list", "tuple", "tensor")[(seed + k) % 3]
        calls.append({"kind": kind, "paths": random_paths(rng, rectangular=kind == "tensor"), "source": f"s{k}"})
    return {"id": f"seed{seed}", "base": state(base), "calls": calls}


def replay_extend(case: dict) -> list[dict]:
    tree, seen = build(case["base"]), []
    for call in case["calls"]:
        before = state(tree)
        grown = tree.extend(as_kind(call["paths"], call["kind"]), call["source"])
        assert isinstance(grown, DraftTree) and grown.tokens.dtype == grown.parents.dtype == torch.long
        assert state(tree) == before, "extend changed the tree it was called on"
        seen.append(state(grown))
        tree = grown
    return seen


def make_merge_case(seed: int) -> dict:
    rng = random.Random(10_000 + seed)
    return {"id": f"seed{seed}", "first": random_paths(rng), "second": random_paths(rng)}


def merged(case: dict) -> dict:
    """`from_paths` and `merge`, which the reference builds on `extend`."""
    first = DraftTree.from_paths(case["first"], "a")
    return {"from_paths": state(first), "merge": state(first.merge(DraftTree.from_paths(case["second"], "b")))}


def make_shape(seed: int) -> dict:
    """Any tree shape: random parents (an earlier node or the root), tokens repeated freely."""
    rng = random.Random(20_000 + seed)
    n = [0, 1, 2, 7][seed] if seed < 4 else rng.randint(1, 12)
    if seed == 3:  # one chain
        parents = [i - 1 for i in range(n)]
    else:
        parents = [rng.choice([-1, *range(i)]) if rng.random() < 0.8 else -1 for i in range(n)]
    return {"id": f"n{n}-seed{seed}", "tokens": [rng.randrange(VOCAB) for _ in range(n)], "parents": parents, "sources": ["s"] * n}


def mask_rows(tree: DraftTree) -> list[str]:
    seen = tree.ancestors()
    assert seen.dtype == torch.bool and seen.shape == (len(tree), len(tree))
    return ["".join("#" if v else "." for v in row) for row in seen.tolist()]


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    extend_cases = [make_extend_case(seed) for seed in range(40)]
    merge_cases = [make_merge_case(seed) for seed in range(20)]
    shapes = [make_shape(seed) for seed in range(30)]
    return {
        "test_extend": [{**c, "expected": replay_extend(c)} for c in extend_cases],
        "test_from_paths_and_merge": [{**c, "expected": merged(c)} for c in merge_cases],
        "test_ancestors": [{**c, "expected": mask_rows(build(c))} for c in shapes],
    }


@pytest.mark.points(3)
def test_extend(case):
    for k, (ours, theirs) in enumerate(zip(replay_extend(case), case["expected"])):
        assert ours == theirs, f"extend call {k + 1} differs from the reference's"


def test_from_paths_and_merge(case):
    assert merged(case) == case["expected"]


@pytest.mark.points(2)
def test_ancestors(case):
    assert mask_rows(build(case)) == case["expected"]
