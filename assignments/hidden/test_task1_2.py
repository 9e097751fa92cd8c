"""Hidden tests of task 1.2: scripts of pool operations give the reference's answers at every step."""

from __future__ import annotations

import random

import pytest
import torch

from ladref.ngram_pool import NGramPool

pytestmark = pytest.mark.task1_2

VOCAB = 5  # few tokens, so that keys collide, continuations repeat and capacities fill up


def make_script(seed: int, kinds: tuple[str, ...]) -> dict:
    """A random pool and operations on it: add, seed, harvest, candidates (by `kinds`)."""
    rng = random.Random(seed)
    n, capacity = rng.randint(2, 5), rng.randint(1, 4)
    ops = []
    for _ in range(rng.randint(5, 40)):
        kind = rng.choice(kinds)
        if kind == "add":
            ops.append(["add", [rng.randrange(VOCAB) for _ in range(n)]])
        elif kind == "seed":
            ops.append(["seed", [rng.randrange(VOCAB) for _ in range(rng.randint(0, 12))]])
        elif kind == "harvest":
            W = rng.randint(1, 5)
            ops.append(["harvest", [[rng.randrange(VOCAB) for _ in range(W)] for _ in range(n - 1)], [rng.randrange(VOCAB) for _ in range(W)]])
        else:
            ops.append(["candidates", rng.randrange(VOCAB), rng.randint(1, capacity + 1)])
    return {"id": f"seed{seed}", "n": n, "capacity": capacity, "ops": ops}


def replay(script: dict) -> list:
    """Run the script on a fresh pool; the answer of every operation, then the pool's final state."""
    pool, answers = NGramPool(script["n"], script["capacity"]), []
    for op in script["ops"]:
        if op[0] == "add":
            pool.add(op[1])
            answers.append(None)
        elif op[0] == "seed":
            pool.seed_from_tokens(op[1])
            answers.append(None)
        elif op[0] == "harvest":
            answers.append([list(ngram) for ngram in pool.harvest(torch.tensor(op[1]), torch.tensor(op[2]))])
        else:
            found = pool.candidates(op[1], op[2])
            answers.append([list(found.shape), str(found.dtype), found.tolist()])
    final = {str(key): pool.candidates(key, script["capacity"]).tolist() for key in range(VOCAB)}
    return [answers, final, len(pool)]


SCRIPTS = {
    "test_add_and_candidates": ("add", "add", "add", "candidates"),
    "test_seed_from_tokens": ("seed", "candidates"),
    "test_harvest": ("harvest", "candidates"),
    "test_mixed_scripts": ("add", "seed", "harvest", "candidates"),
}


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    cases = {}
    for k, (name, kinds) in enumerate(SCRIPTS.items()):
        scripts = [make_script(1000 * k + seed, kinds) for seed in range(25)]
        cases[name] = [{**s, "expected": replay(s)} for s in scripts]
    return cases


@pytest.mark.points(2)
def test_add_and_candidates(case):
    assert replay(case) == case["expected"]


def test_seed_from_tokens(case):
    assert replay(case) == case["expected"]


def test_harvest(case):
    assert replay(case) == case["expected"]


@pytest.mark.points(2)
def test_mixed_scripts(case):
    assert replay(case) == case["expected"]
