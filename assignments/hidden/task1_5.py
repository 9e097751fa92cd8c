"""Probes of task 1.5: tries grown by `extend` and their ancestor masks, compared with the reference's.

The cases are drawn in the reference's run only (`cases`); every tree a probe starts from is built with the `DraftTree` constructor from recorded tokens and
parents, so a case tests the submitted `extend`, `path` or `ancestors` alone. Hidden cases go deeper
(paths of up to 14 tokens, trees of up to 40 nodes) and wider than any public test.
"""

from __future__ import annotations

import random

import torch
from probing import Group, random_tree, state, tree_of

from ladref.tree import DraftTree

VOCAB = 4  # few tokens, so that paths share prefixes often


def random_paths(rng: random.Random, longest: int, most: int, rectangular: bool = False) -> list[list[int]]:
    """0..`most` paths of 0..`longest` tokens (one length for all when `rectangular`)."""
    length = rng.randint(1, longest)
    return [[rng.randrange(VOCAB) for _ in range(length if rectangular else rng.randint(0, longest))]
            for _ in range(rng.randint(0, most))]


def as_kind(paths: list[list[int]], kind: str):
    """The paths as given to `extend`: lists, tuples, or a (g, d) tensor."""
    if kind == "tuple":
        return tuple(tuple(p) for p in paths)
    if kind == "tensor":
        return torch.tensor(paths, dtype=torch.long) if paths else torch.empty(0, 1, dtype=torch.long)
    return [list(p) for p in paths]


def extend_case(rng: random.Random, k: int, longest: int, most: int) -> dict:
    """A trie (grown by the reference: `cases` runs only there), then 1..3 calls of extend with other sources."""
    base = state(DraftTree.empty().extend(random_paths(rng, longest, most), "base") if k % 4 else DraftTree.empty())
    calls = []
    for j in range(rng.randint(1, 3)):
        kind = ("list", "tuple", "tensor")[(k + j) % 3]
        calls.append({"kind": kind, "paths": random_paths(rng, longest, most, rectangular=kind == "tensor"), "source": f"s{j}"})
    return {"id": f"extend{k}", "base": base, "calls": calls}


def replay_extend(case: dict) -> list[dict]:
    """The tree after each call, and whether the call left the tree it was called on unchanged."""
    tree, seen = tree_of(case["base"]), []
    for call in case["calls"]:
        before = state(tree)
        grown = tree.extend(as_kind(call["paths"], call["kind"]), call["source"])
        seen.append({"tree": state(grown), "dtypes": [str(grown.tokens.dtype), str(grown.parents.dtype)],
                     "caller unchanged": state(tree) == before})
        tree = grown
    return seen


def merged(case: dict) -> dict:
    """`from_paths` and `merge`, which the reference builds on `extend`."""
    first = DraftTree.from_paths(case["first"], "a")
    return {"from_paths": state(first), "merge": state(first.merge(DraftTree.from_paths(case["second"], "b")))}


def paths(case: dict) -> list:
    """`path` and `path_tokens` of every node."""
    tree = tree_of(case)
    return [[[int(n) for n in tree.path(node)], [int(t) for t in tree.path_tokens(node)]] for node in range(len(tree))]


def ancestors_rows(case: dict) -> dict:
    seen = tree_of(case).ancestors()
    return {"dtype": str(seen.dtype), "shape": list(seen.shape), "rows": ["".join("#" if v else "." for v in r) for r in seen.tolist()]}


GROUPS = {
    "extend (small tries)": Group(replay_extend, 1, visible=True),
    "extend": Group(replay_extend, 2),
    "from_paths and merge": Group(merged, 1, visible=True),
    "ancestors (small trees)": Group(ancestors_rows, 1, visible=True),
    "ancestors": Group(ancestors_rows, 2),
    "path": Group(paths, 1),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    shapes = [{"tokens": [], "parents": []}, {"tokens": [1], "parents": [-1]},
              {"tokens": [1, 2, 3, 0, 1, 2, 3, 0, 1, 2], "parents": list(range(-1, 9))}]  # empty, one node, a chain of 10
    big = shapes + [random_tree(rng, 40, VOCAB, chain=0.6) for _ in range(27)]
    merges = [{"id": f"merge{k}", "first": random_paths(rng, 5, 5), "second": random_paths(rng, 5, 5)} for k in range(12)]
    return {
        "extend (small tries)": [extend_case(rng, k, 4, 4) for k in range(12)],
        "extend": [extend_case(rng, k, 14, 10) for k in range(30)],
        "from_paths and merge": merges,
        "ancestors (small trees)": [{"id": f"small{k}", **random_tree(rng, 6, VOCAB)} for k in range(12)],
        "ancestors": [{"id": f"n{len(t['tokens'])}-{k}", **t} for k, t in enumerate(big)],
        # trees with nodes only: an empty tree's answer is [] without a call, so any code (a stub too) would pass it
        "path": [{"id": f"n{len(t['tokens'])}-{k}", **t} for k, t in enumerate(big[::-1]) if t["tokens"]],
    }
