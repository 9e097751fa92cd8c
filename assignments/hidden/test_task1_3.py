"""Hidden tests of task 1.3: verdicts on random candidate sets agree with the reference's."""

from __future__ import annotations

import random

import pytest
import torch

from ladref.verify import verify_greedy

pytestmark = pytest.mark.task1_3

VOCAB = 4  # few tokens, so that candidates often match greedy's chain for a while, and tie


def make_case(seed: int, ties: bool) -> dict:
    """Random candidates, some copied from greedy's chain for a random length; with `ties`, duplicated prefixes."""
    rng = random.Random(seed)
    g, n1 = rng.randint(0 if not ties else 2, 6), rng.randint(1, 5)
    chain = [rng.randrange(VOCAB) for _ in range(n1 + 1)]  # greedy's y_1 .. y_N
    candidates = []
    for _ in range(g):
        keep = rng.randint(0, n1)
        candidates.append(chain[:keep] + [rng.randrange(VOCAB) for _ in range(n1 - keep)])
    if ties and g:
        candidates[-1] = list(candidates[0])
    preds = [[rng.randrange(VOCAB) for _ in range(n1)] for _ in range(g)]
    for c, p in zip(candidates, preds):  # where a candidate follows the chain, the model predicts the chain
        for j in range(n1):
            if c[: j + 1] == chain[: j + 1]:
                p[j] = chain[j + 1]
    return {"id": f"{'ties' if ties else 'random'}{seed}", "n1": n1, "candidates": candidates, "first": chain[0], "preds": preds}


def verdict_of(case: dict):
    shape = (len(case["candidates"]), case["n1"])
    candidates = torch.tensor(case["candidates"], dtype=torch.long).view(shape)
    preds = torch.tensor(case["preds"], dtype=torch.long).view(shape)
    return verify_greedy(candidates, torch.tensor(case["first"]), preds)


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    cases = {}
    for name, ties in (("test_verdicts", False), ("test_ties", True)):
        made = [make_case(seed, ties) for seed in range(40)]
        cases[name] = [{**c, "tokens": verdict_of(c).tokens.tolist(), "matched": verdict_of(c).matched} for c in made]
    return cases


def check(case: dict) -> None:
    verdict = verdict_of(case)
    assert verdict.tokens.tolist() == case["tokens"]
    assert verdict.matched == case["matched"]
    if case["matched"] == 0:
        assert verdict.best is None
    else:  # any candidate with the longest matching prefix will do
        assert case["candidates"][verdict.best][: case["matched"]] == case["tokens"][: case["matched"]]


@pytest.mark.points(3)
def test_verdicts(case):
    check(case)


@pytest.mark.points(2)
def test_ties(case):
    check(case)
