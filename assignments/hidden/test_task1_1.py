"""Hidden tests of task 1.1: the step's positions, mask, inputs and additive masks equal the reference's.

Draft trees are built with the `DraftTree` constructor from recorded tokens and parents (any shape,
tries and separate chains alike), and the additive masks are fed recorded boolean masks (step
masks, padded ones, arbitrary ones), so each case tests one submitted function.
"""

from __future__ import annotations

import random

import pytest
import torch

from ladref.masks import StepLayout, build_step_inputs, static_additive, to_additive
from ladref.tree import DraftTree

pytestmark = pytest.mark.task1_1

DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def rows(mask: torch.Tensor) -> list[str]:
    """A bool (q, k) mask as q strings of '#' (true) and '.'."""
    return ["".join("#" if v else "." for v in row) for row in mask.tolist()]


def unrows(lines: list[str]) -> torch.Tensor:
    return torch.tensor([[c == "#" for c in line] for line in lines], dtype=torch.bool).view(len(lines), -1)


def random_tree(rng: random.Random, max_nodes: int = 9) -> dict:
    """A tree of any shape: each node's parent an earlier node or the root."""
    n = rng.randint(0, max_nodes)
    parents = [rng.choice([-1, *range(i)]) if rng.random() < 0.75 else -1 for i in range(n)]
    return {"tokens": [rng.randrange(20) for _ in range(n)], "parents": parents}


def tree_of(recorded: dict) -> DraftTree:
    n = len(recorded["tokens"])
    return DraftTree(torch.tensor(recorded["tokens"], dtype=torch.long), torch.tensor(recorded["parents"], dtype=torch.long),
                     ("s",) * n)


def layout_cases(count: int, salt: int) -> list[dict]:
    """Layouts over W in 0..5 (0: no window), N in 2..6, and random trees (the first ones fixed)."""
    fixed = [(0, 2, {"tokens": [], "parents": []}), (3, 2, {"tokens": [], "parents": []}),
             (5, 4, {"tokens": [7, 8, 9, 6, 5, 4], "parents": [-1, 0, 1, -1, 3, 4]}),  # the paper's Fig. 5: two chains
             (0, 3, {"tokens": [1, 2, 3], "parents": [-1, 0, 1]}), (2, 4, {"tokens": [1, 2, 3, 4], "parents": [-1, 0, 0, 2]})]
    cases = [{"id": f"W{W}-N{N}-n{len(t['tokens'])}-fixed{k}", "W": W, "N": N, "tree": t} for k, (W, N, t) in enumerate(fixed)]
    rng = random.Random(salt)
    while len(cases) < count:
        W, N, tree = rng.choice([0, 1, 2, 3, 4, 5]), rng.randint(2, 6), random_tree(rng)
        cases.append({"id": f"W{W}-N{N}-n{len(tree['tokens'])}-r{len(cases)}", "W": W, "N": N, "tree": tree})
    return cases


def layout_of(case: dict) -> StepLayout:
    return StepLayout(case["W"], case["N"], tree_of(case["tree"]))


def step_cases(count: int) -> list[dict]:
    rng, cases = random.Random(7), []
    for k in range(count):
        W, N = (0, 0) if k % 4 == 0 else (rng.randint(1, 5), rng.randint(2, 5))
        window = [[rng.randrange(50) for _ in range(W)] for _ in range(N - 1)] if W else None
        cases.append({"id": f"{'W0' if window is None else f'W{W}-N{N}'}-step{k}", "current": rng.randrange(50),
                      "position": rng.randrange(40), "window": window, "tree": random_tree(rng)})
    return cases


def step_of(case: dict):
    window = None if case["window"] is None else torch.tensor(case["window"], dtype=torch.long)
    before = None if window is None else window.clone()
    step = build_step_inputs(case["current"], window, tree_of(case["tree"]), case["position"])
    if window is not None:
        assert torch.equal(window, before), "build_step_inputs changed the caller's window"
    layout = step.layout
    return {"input_ids": step.input_ids.tolist(), "position_ids": step.position_ids.tolist(), "allowed": rows(step.allowed),
            "dtypes": [str(step.input_ids.dtype), str(step.position_ids.dtype), str(step.allowed.dtype)],
            "layout": [layout.window_size, layout.lookahead_len, layout.length, len(layout.tree)]}


def masks_to_convert(count: int, salt: int) -> list[tuple[str, list[str]]]:
    """(id, allowed rows): step masks, the same padded as a constant-shape runner pads them (dummies
    that see only themselves), and arbitrary boolean matrices: the additive forms take any mask."""
    rng, found = random.Random(salt), []
    for k, case in enumerate(layout_cases(count, salt)):
        allowed = layout_of(case).allowed()
        if k % 3 == 1:
            pad = rng.randint(1, 4)
            found.append((f"{case['id']}-pad{pad}", rows(torch.block_diag(allowed, torch.eye(pad, dtype=torch.bool)))))
        elif k % 3 == 2:
            q = rng.randint(1, 9)
            found.append((f"random{k}-q{q}", ["".join(rng.choice("#.") for _ in range(q)) for _ in range(q)]))
        else:
            found.append((case["id"], rows(allowed)))
    return found


def additive_cases(count: int) -> list[dict]:
    cases = []
    for k, (name, allowed) in enumerate(masks_to_convert(count, salt=11)):
        dtype = list(DTYPES)[k % len(DTYPES)]
        cases.append({"id": f"{name}-past{k % 6 * 3}-{dtype}", "allowed": allowed, "past": k % 6 * 3, "dtype": dtype})
    return cases


def static_cases(count: int) -> list[dict]:
    cases = []
    for k, (name, allowed) in enumerate(masks_to_convert(count, salt=13)):
        length, spare = (0, 4, 9, 2, 17)[k % 5], (0, 3, 1)[k % 3]
        cases.append({"id": f"{name}-len{length}-spare{spare}", "allowed": allowed, "length": length, "spare": spare,
                      "dtype": ("float32", "float64", "float16")[k % 3]})
    return cases


def additive_of(case: dict) -> list[str]:
    dtype = DTYPES[case["dtype"]]
    allowed = unrows(case["allowed"])
    mask = to_additive(allowed, case["past"], dtype)
    q = allowed.shape[0]
    assert mask.shape == (1, 1, q, case["past"] + q) and mask.dtype == dtype
    assert bool(((mask == 0) | (mask == torch.finfo(dtype).min)).all()), "entries must be 0 or finfo(dtype).min"
    return rows(mask[0, 0] == 0)


def static_of(case: dict) -> list[str]:
    dtype = DTYPES[case["dtype"]]
    allowed = unrows(case["allowed"])
    q = allowed.shape[0]
    max_length = case["length"] + q + case["spare"]
    mask = static_additive(allowed, torch.tensor(case["length"]), max_length, dtype)
    assert mask.shape == (1, 1, q, max_length) and mask.dtype == dtype
    assert bool(((mask == 0) | (mask == torch.finfo(dtype).min)).all()), "entries must be 0 or finfo(dtype).min"
    return rows(mask[0, 0] == 0)


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    layouts = layout_cases(40, salt=5)
    return {
        "test_position_offsets": [{**c, "expected": layout_of(c).position_offsets().tolist()} for c in layouts],
        "test_allowed": [{**c, "expected": rows(layout_of(c).allowed())} for c in layouts],
        "test_build_step_inputs": [{**c, "expected": step_of(c)} for c in step_cases(24)],
        "test_to_additive": [{**c, "expected": additive_of(c)} for c in additive_cases(18)],
        "test_static_additive": [{**c, "expected": static_of(c)} for c in static_cases(18)],
    }


def test_position_offsets(case):
    offsets = layout_of(case).position_offsets()
    assert offsets.dtype == torch.long
    assert offsets.tolist() == case["expected"]


@pytest.mark.points(3)
def test_allowed(case):
    allowed = layout_of(case).allowed()
    assert allowed.dtype == torch.bool, "allowed() must be a bool tensor"
    assert rows(allowed) == case["expected"]


@pytest.mark.points(2)
def test_build_step_inputs(case):
    assert step_of(case) == case["expected"]


def test_to_additive(case):
    assert additive_of(case) == case["expected"]


def test_static_additive(case):
    assert static_of(case) == case["expected"]
