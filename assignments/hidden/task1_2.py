"""Probes of task 1.2: scripts of pool operations, the answer of every operation compared with the reference's.

Hidden scripts use longer n-grams, larger capacities and wider windows than any public test.
"""

from __future__ import annotations

import random

import torch
from probing import Group

from ladref.sources.ngram_pool import NGramPool

VOCAB = 5  # few tokens, so that keys collide, continuations repeat and capacities fill up


def make_script(rng: random.Random, k: int, kinds: tuple[str, ...], big: bool) -> dict:
    """A random pool and operations on it: add, seed, harvest, candidates (by `kinds`)."""
    n, capacity = rng.randint(2, 7 if big else 4), rng.randint(1, 8 if big else 3)
    ops = []
    for _ in range(rng.randint(5, 60 if big else 15)):
        kind = rng.choice(kinds)
        if kind == "add":
            ops.append(["add", [rng.randrange(VOCAB) for _ in range(n)]])
        elif kind == "seed":
            ops.append(["seed", [rng.randrange(VOCAB) for _ in range(rng.randint(0, 30 if big else 10))]])
        elif kind == "harvest":
            W = rng.randint(1, 9 if big else 3)
            ops.append(["harvest", [[rng.randrange(VOCAB) for _ in range(W)] for _ in range(n - 1)], [rng.randrange(VOCAB) for _ in range(W)]])
        else:
            ops.append(["candidates", rng.randrange(VOCAB), rng.randint(1, capacity + 1)])
    return {"id": f"script{k}-n{n}-cap{capacity}", "n": n, "capacity": capacity, "ops": ops}


def replay(script: dict) -> dict:
    """Run the script on a fresh pool: the answer of every operation, then the pool's final state."""
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
    return {"answers": answers, "final pool": final, "len": len(pool)}


GROUPS = {
    "harvest (small pools)": Group(replay, 1, visible=True),
    "add and candidates (small pools)": Group(replay, 1, visible=True),
    "add and candidates": Group(replay, 2),
    "seed_from_tokens": Group(replay, 1),
    "harvest": Group(replay, 1),
    "mixed scripts": Group(replay, 2),
}
KINDS = {
    "harvest (small pools)": (("harvest", "candidates"), False),
    "add and candidates (small pools)": (("add", "add", "candidates"), False),
    "add and candidates": (("add", "add", "add", "candidates"), True),
    "seed_from_tokens": (("seed", "candidates"), True),
    "harvest": (("harvest", "candidates"), True),
    "mixed scripts": (("add", "seed", "harvest", "candidates"), True),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    return {name: [make_script(rng, k, kinds, big) for k in range(25 if big else 10)] for name, (kinds, big) in KINDS.items()}
