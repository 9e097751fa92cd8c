"""What the probe modules share: the `Group` record and ways to write tensors and trees as data.

A probe module (``task1_2.py`` ...) defines ``GROUPS = {name: Group(...)}`` and
``cases(seed) -> {name: [case, ...]}`` (and, optionally, ``warm_up()``, run before any case is
timed); each case is a JSON object with an "id" and the inputs.
`Group.observe` calls the task's functions on one case and returns plain data (lists, numbers,
strings): the autograder runs it on the reference and on the submission, in separate processes,
and judges the submission's answer against the reference's itself (`Group.judge`: equal, or
another judge of ``answer_diff.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ladref.tree import DraftTree


@dataclass(frozen=True)
class Group:
    """One graded group of cases.

    Attributes:
        observe: case -> plain data, calling the submission's functions.
        points: the group's weight within its task (the task's points are split by weight).
        visible: shown to students at once (else only after the due date). Visible groups draw
            small random cases anew for every grading run, so that no submission can learn them.
        judge: how the grader judges each answer against the reference's, by name
            (``assignments/answer_diff.py``'s ``JUDGES``): "equal" (the default), "modelled_time"
            (the open task's modelled time), "law" (a chi-square test against the exact law).
    """

    observe: Callable[[dict], Any]
    points: int = 1
    visible: bool = False
    judge: str = "equal"


class Operations(TorchDispatchMode):
    """The names of the torch operations run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def on_meta(call: Callable[[], Any]) -> tuple[str, list[str]]:
    """Run `call` (on tensors of torch's meta device: shapes, no values, so that reading one back fails):
    "ok" or the error's type, and the torch operations it ran."""
    with torch.inference_mode(), Operations() as seen:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a read of a value the meta device does not hold, and the like
            return type(exc).__name__, seen.names
    return "ok", seen.names


def rows(mask: torch.Tensor) -> list[str]:
    """A bool (q, k) mask as q strings of '#' (true) and '.'."""
    return ["".join("#" if v else "." for v in row) for row in mask.tolist()]


def unrows(lines: list[str]) -> torch.Tensor:
    return torch.tensor([[c == "#" for c in line] for line in lines], dtype=torch.bool).view(len(lines), -1)


def as_list(value) -> list | None:
    return None if value is None else torch.as_tensor(value).tolist()


def tree_of(recorded: dict) -> DraftTree:
    """A `DraftTree` from recorded tokens and parents (built by the constructor: no submitted code)."""
    n = len(recorded["tokens"])
    return DraftTree(torch.tensor(recorded["tokens"], dtype=torch.long), torch.tensor(recorded["parents"], dtype=torch.long),
                     tuple(recorded.get("sources", ("s",) * n)))


def state(tree: DraftTree) -> dict:
    return {"tokens": tree.tokens.tolist(), "parents": tree.parents.tolist(), "sources": list(tree.sources)}


def random_tree(rng: random.Random, max_nodes: int, vocab: int = 20, chain: float = 0.3) -> dict:
    """Any tree shape with up to `max_nodes` nodes: each node's parent an earlier node or the root,
    the previous node with probability `chain` (long chains: trees deeper than any public test's)."""
    n = rng.randint(0, max_nodes)
    parents = []
    for i in range(n):
        if i and rng.random() < chain:
            parents.append(i - 1)
        else:
            parents.append(rng.choice([-1, *range(i)]) if rng.random() < 0.75 else -1)
    return {"tokens": [rng.randrange(vocab) for _ in range(n)], "parents": parents}


def depth(recorded: dict) -> int:
    """The deepest node's depth (1 for a child of the root; 0 for an empty tree)."""
    depths: list[int] = []
    for parent in recorded["parents"]:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return max(depths, default=0)
