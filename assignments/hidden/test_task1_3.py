"""Hidden tests of task 1.3: verdicts on random draft tries agree with the reference's.

A case is a trie (siblings carry distinct tokens, as every trie ladref builds), recorded as
tokens and parents and rebuilt with the `DraftTree` constructor, and the model's argmax after
the current token and after every node: along the nodes that spell greedy's own continuation
the predictions follow it, elsewhere they are random.
"""

from __future__ import annotations

import random

import pytest
import torch

from ladref.tree import DraftTree
from ladref.verify import verify_greedy

pytestmark = pytest.mark.task1_3

VOCAB = 3  # few tokens, so that drafts often follow greedy's continuation for a while


def make_case(seed: int, shallow: bool) -> dict:
    """A trie of random drafts, some copying greedy's continuation for a random length."""
    rng = random.Random(seed)
    depth = rng.randint(1, 3 if shallow else 6)
    chain = [rng.randrange(VOCAB) for _ in range(depth + 1)]  # greedy's y_1 .. y_{depth+1}
    paths = []
    for _ in range(rng.randint(0, 2 if shallow else 8)):
        keep = rng.randint(0, depth)
        paths.append(chain[:keep] + [rng.randrange(VOCAB) for _ in range(rng.randint(0 if keep else 1, depth - keep))])
    tree = DraftTree.from_paths(paths, "s")  # the reference's trie, recorded as tokens and parents
    preds = []
    for node in range(len(tree)):  # after a node spelling chain[:d], greedy predicts chain[d]
        spelled = tree.path_tokens(node)
        on_chain = spelled == chain[: len(spelled)]
        preds.append(chain[len(spelled)] if on_chain and len(spelled) < len(chain) else rng.randrange(VOCAB))
    return {"id": f"{'shallow' if shallow else 'deep'}{seed}", "tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(),
            "root_pred": chain[0], "node_preds": preds}


def verdict_of(case: dict) -> dict:
    n = len(case["tokens"])
    tree = DraftTree(torch.tensor(case["tokens"], dtype=torch.long), torch.tensor(case["parents"], dtype=torch.long), ("s",) * n)
    verdict = verify_greedy(tree, case["root_pred"], torch.tensor(case["node_preds"], dtype=torch.long))
    assert verdict.tokens.dim() == 1 and verdict.tokens.dtype == torch.long, "Verdict.tokens must be a 1-D long tensor"
    return {"tokens": verdict.tokens.tolist(), "path": [int(node) for node in verdict.path]}


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    cases = {}
    for name, shallow in (("test_deep_tries", False), ("test_small_tries", True)):
        made = [make_case(seed + (1000 if shallow else 0), shallow) for seed in range(40)]
        cases[name] = [{**c, "expected": verdict_of(c)} for c in made]
    return cases


@pytest.mark.points(3)
def test_deep_tries(case):
    assert verdict_of(case) == case["expected"]


@pytest.mark.points(2)
def test_small_tries(case):
    assert verdict_of(case) == case["expected"]
