"""Probes of task 1.1: the step's positions, mask, inputs and additive masks, compared with the reference's.

Draft trees are built with the `DraftTree` constructor from recorded tokens and parents (any shape,
tries and separate chains alike), and the additive masks are fed recorded boolean masks (step
masks, padded ones, arbitrary ones), so each case tests one submitted function. Hidden cases use
wider windows, longer n-grams and trees of up to 24 nodes, deeper than any public test's.
"""

from __future__ import annotations

import random

import torch
from probing import Group, random_tree, rows, tree_of, unrows

from ladref.masks import StepLayout, build_step_inputs, static_additive, to_additive

DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
FIXED = [(0, 2, {"tokens": [], "parents": []}), (3, 2, {"tokens": [], "parents": []}),
         (5, 4, {"tokens": [7, 8, 9, 6, 5, 4], "parents": [-1, 0, 1, -1, 3, 4]}),  # the paper's Fig. 5: two chains
         (0, 3, {"tokens": [1, 2, 3], "parents": [-1, 0, 1]}), (2, 4, {"tokens": [1, 2, 3, 4], "parents": [-1, 0, 0, 2]})]


def layout_cases(rng: random.Random, count: int, big: bool) -> list[dict]:
    """Layouts over W in 0..8 (0: no window), N in 2..7, and random trees (the paper's shapes first)."""
    cases = [] if big else [{"id": f"W{W}-N{N}-fixed{k}", "W": W, "N": N, "tree": t} for k, (W, N, t) in enumerate(FIXED)]
    while len(cases) < count:
        W, N = rng.randint(0, 8 if big else 4), rng.randint(2, 7 if big else 4)
        tree = random_tree(rng, 24 if big else 6, chain=0.5 if big else 0.2)
        cases.append({"id": f"W{W}-N{N}-n{len(tree['tokens'])}-{len(cases)}", "W": W, "N": N, "tree": tree})
    return cases


def layout_of(case: dict) -> StepLayout:
    return StepLayout(case["W"], case["N"], tree_of(case["tree"]))


def offsets(case: dict) -> dict:
    found = layout_of(case).position_offsets()
    return {"dtype": str(found.dtype), "offsets": found.tolist()}


def allowed(case: dict) -> dict:
    found = layout_of(case).allowed()
    return {"dtype": str(found.dtype), "rows": rows(found)}


def step_cases(rng: random.Random, count: int, big: bool) -> list[dict]:
    cases = []
    for k in range(count):
        W, N = (0, 0) if k % 4 == 0 else (rng.randint(1, 8 if big else 3), rng.randint(2, 6 if big else 4))
        window = [[rng.randrange(50) for _ in range(W)] for _ in range(N - 1)] if W else None
        cases.append({"id": f"{'W0' if window is None else f'W{W}-N{N}'}-step{k}", "current": rng.randrange(50),
                      "position": rng.randrange(400 if big else 30), "window": window,
                      "tree": random_tree(rng, 24 if big else 5, chain=0.5 if big else 0.2)})
    return cases


def step(case: dict) -> dict:
    window = None if case["window"] is None else torch.tensor(case["window"], dtype=torch.long)
    before = None if window is None else window.clone()
    made = build_step_inputs(case["current"], window, tree_of(case["tree"]), case["position"])
    layout = made.layout
    return {"input_ids": made.input_ids.tolist(), "position_ids": made.position_ids.tolist(), "allowed": rows(made.allowed),
            "dtypes": [str(made.input_ids.dtype), str(made.position_ids.dtype), str(made.allowed.dtype)],
            "layout": [layout.window_size, layout.lookahead_len, layout.length, len(layout.tree)],
            "window unchanged": window is None or torch.equal(window, before)}


def masks_to_convert(rng: random.Random, count: int, big: bool) -> list[tuple[str, list[str]]]:
    """(id, allowed rows): step masks (as the reference builds them), the same padded as a
    constant-shape runner pads them, and arbitrary boolean matrices."""
    found = []
    for k, case in enumerate(layout_cases(rng, count, big)):
        mask = layout_of(case).allowed()
        if k % 3 == 1:
            pad = rng.randint(1, 6)
            found.append((f"{case['id']}-pad{pad}", rows(torch.block_diag(mask, torch.eye(pad, dtype=torch.bool)))))
        elif k % 3 == 2:
            q = rng.randint(1, 20 if big else 6)
            found.append((f"random{k}-q{q}", ["".join(rng.choice("#.") for _ in range(q)) for _ in range(q)]))
        else:
            found.append((case["id"], rows(mask)))
    return found


def additive(case: dict) -> dict:
    dtype = DTYPES[case["dtype"]]
    mask = to_additive(unrows(case["allowed"]), case["past"], dtype)
    return {"shape": list(mask.shape), "dtype": str(mask.dtype), "entries 0 or min": bool(((mask == 0) | (mask == torch.finfo(dtype).min)).all()),
            "open": rows(mask.reshape(mask.shape[-2], -1) == 0)}


def static(case: dict) -> dict:
    dtype = DTYPES[case["dtype"]]
    q = len(case["allowed"])
    mask = static_additive(unrows(case["allowed"]), torch.tensor(case["length"]), case["length"] + q + case["spare"], dtype)
    return {"shape": list(mask.shape), "dtype": str(mask.dtype), "entries 0 or min": bool(((mask == 0) | (mask == torch.finfo(dtype).min)).all()),
            "open": rows(mask.reshape(mask.shape[-2], -1) == 0)}


GROUPS = {
    "allowed (small layouts)": Group(allowed, 1, visible=True),
    "build_step_inputs (small steps)": Group(step, 1, visible=True),
    "position_offsets": Group(offsets, 1),
    "allowed": Group(allowed, 2),
    "build_step_inputs": Group(step, 1),
    "to_additive": Group(additive, 1),
    "static_additive": Group(static, 1),
}


def cases(seed: int) -> dict[str, list[dict]]:
    rng = random.Random(seed)
    small, big = layout_cases(rng, 15, False), layout_cases(rng, 40, True)
    adds = [{"id": f"{name}-past{k % 6 * 5}-{list(DTYPES)[k % 4]}", "allowed": mask, "past": k % 6 * 5, "dtype": list(DTYPES)[k % 4]}
            for k, (name, mask) in enumerate(masks_to_convert(rng, 24, True))]
    statics = [{"id": f"{name}-len{(0, 4, 9, 2, 37)[k % 5]}-spare{(0, 3, 1)[k % 3]}", "allowed": mask, "length": (0, 4, 9, 2, 37)[k % 5],
                "spare": (0, 3, 1)[k % 3], "dtype": ("float32", "float64", "float16")[k % 3]}
               for k, (name, mask) in enumerate(masks_to_convert(rng, 24, True))]
    return {
        "allowed (small layouts)": small,
        "build_step_inputs (small steps)": step_cases(rng, 10, False),
        "position_offsets": big,
        "allowed": big,
        "build_step_inputs": step_cases(rng, 30, True),
        "to_additive": adds,
        "static_additive": statics,
    }
