"""Hidden tests of task 1.1: the step's positions, mask and inputs equal the reference's, case by case."""

from __future__ import annotations

import pytest
import torch

from ladref.masks import StepLayout, build_step_inputs, static_additive, to_additive

pytestmark = pytest.mark.task1_1

LAYOUTS = [(W, N, g) for W in (1, 2, 3, 5, 7) for N in (2, 3, 4, 6) for g in (0, 1, 3)]
DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def rows(mask: torch.Tensor) -> list[str]:
    """A bool (q, k) mask as q strings of '#' (true) and '.'."""
    return ["".join("#" if v else "." for v in row) for row in mask.tolist()]


def random_step(seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    W, N, g = (int(torch.randint(lo, hi, (), generator=gen)) for lo, hi in ((1, 6), (2, 6), (0, 4)))
    return {"current": int(torch.randint(0, 50, (), generator=gen)), "position": int(torch.randint(0, 30, (), generator=gen)),
            "window": torch.randint(0, 50, (N - 1, W), generator=gen).tolist(),
            "candidates": torch.randint(0, 50, (g, N - 1), generator=gen).tolist()}


def step_of(case: dict):
    candidates = torch.tensor(case["candidates"], dtype=torch.long).view(-1, len(case["window"]))
    return build_step_inputs(case["current"], torch.tensor(case["window"]), candidates, case["position"])


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    layout_ids = [f"W{W}-N{N}-g{g}" for W, N, g in LAYOUTS]
    steps = [random_step(seed) for seed in range(16)]
    additive = [{"layout": [W, N, g], "past": past, "dtype": dtype}
                for (W, N, g), past, dtype in zip(LAYOUTS[::5], (0, 3, 7, 1, 12, 5) * 2, list(DTYPES) * 4)]
    static = [{"layout": [W, N, g], "length": length, "spare": spare}
              for (W, N, g), length, spare in zip(LAYOUTS[2::5], (0, 4, 9, 2) * 3, (0, 3, 1) * 4)]
    return {
        "test_position_offsets": [{"id": i, "layout": list(lay), "expected": StepLayout(*lay).position_offsets().tolist()}
                                  for i, lay in zip(layout_ids, LAYOUTS)],
        "test_allowed": [{"id": i, "layout": list(lay), "expected": rows(StepLayout(*lay).allowed())}
                         for i, lay in zip(layout_ids, LAYOUTS)],
        "test_build_step_inputs": [{"id": f"seed{k}", **case, "input_ids": step_of(case).input_ids.tolist(),
                                    "position_ids": step_of(case).position_ids.tolist(), "allowed": rows(step_of(case).allowed)}
                                   for k, case in enumerate(steps)],
        "test_to_additive": [{"id": f"W{c['layout'][0]}-N{c['layout'][1]}-g{c['layout'][2]}-past{c['past']}-{c['dtype']}", **c,
                              "visible": rows(to_additive(StepLayout(*c["layout"]).allowed(), c["past"], DTYPES[c["dtype"]])[0, 0] == 0)}
                             for c in additive],
        "test_static_additive": [{"id": f"W{c['layout'][0]}-N{c['layout'][1]}-g{c['layout'][2]}-len{c['length']}-spare{c['spare']}", **c,
                                  "visible": rows(static_of(c)[0, 0] == 0)} for c in static],
    }


def static_of(case: dict) -> torch.Tensor:
    allowed = StepLayout(*case["layout"]).allowed()
    max_length = case["length"] + allowed.shape[0] + case["spare"]
    return static_additive(allowed, torch.tensor(case["length"]), max_length, torch.float32)


def test_position_offsets(case):
    assert StepLayout(*case["layout"]).position_offsets().tolist() == case["expected"]


@pytest.mark.points(3)
def test_allowed(case):
    allowed = StepLayout(*case["layout"]).allowed()
    assert allowed.dtype == torch.bool
    assert rows(allowed) == case["expected"]


@pytest.mark.points(2)
def test_build_step_inputs(case):
    step = step_of(case)
    assert step.input_ids.tolist() == case["input_ids"]
    assert step.position_ids.tolist() == case["position_ids"]
    assert rows(step.allowed) == case["allowed"]


def test_to_additive(case):
    dtype = DTYPES[case["dtype"]]
    mask = to_additive(StepLayout(*case["layout"]).allowed(), case["past"], dtype)
    assert mask.dtype == dtype and mask.dim() == 4
    assert rows(mask[0, 0] == 0) == case["visible"]
    assert bool(((mask == 0) | (mask == torch.finfo(dtype).min)).all())


def test_static_additive(case):
    mask = static_of(case)
    assert rows(mask[0, 0] == 0) == case["visible"]
    assert bool(((mask == 0) | (mask == torch.finfo(torch.float32).min)).all())
