"""Between two reads of a drafting batch: whether the next step proposes at all, and how long the passes took.

`ladref.batched.loop.decode_batch` asks `Gate.drafting` before each step. It is False when the
choice finds that no draft can pay (`ladref.batched.policy.BatchPolicy.may_draft`: host arithmetic
on the surface at the batch's B and kv, and on the `hope` the last read brought); the step is then
a bare one (`ladref.batched.step.BatchStep.run_bare`): nothing proposed, merged or priced, the
sources still learning from the tokens kept. It is decided after every step, so it follows the
cache as it grows and the batch as rows leave (one step late: what the step itself taught the
choice reaches the host with the next read).

The choice keeps observing bare steps while a proposal it made may still be judged (a node at
most `deepest` deep is, within that many steps, each keeping a token), then rests: its hope does
not change until it proposes again, and the read stops bringing it. Each read also times the
passes since the one before, for the choice's calibration (`BatchPolicy.timed`): time between two
reads, no sync of its own (the first run's excepted: its one-off work).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from .prices import Pass
from .state import BatchState


class Gate:
    """The host's side of a batch's choice: the next step's kind, the hope read, the passes timed.

    Args:
        choice: the batch's `ladref.batched.source.BatchChoice`; its optional ``may_draft``, ``hope``
            and ``timed`` (`ladref.batched.policy.BatchPolicy`'s) are used when it has them (without
            ``may_draft`` every step proposes).
        deepest: the deepest node a source drafts; window_cells: the window's cells besides the
            current token (None: no window).

    Attributes:
        drafting: whether the next step proposes (decided after each step, `decide`).
        hope: the choice's `hope` as last read (`heard`).
    """

    def __init__(self, choice: object, deepest: int, window_cells: int | None) -> None:
        self.choice, self.deepest, self.cells = choice, deepest, window_cells
        self.ask = getattr(choice, "may_draft", None)
        self.timer = getattr(choice, "timed", None)
        self.drafting, self.hope = True, [0, 0]
        self.pending = 0  # bare steps the choice still observes (a proposal of its own may still be judged)
        self.fresh = True  # the choice may have learned since the last read: the read brings its hope
        self.passes: list[Pass] = []  # (q, rows, kv) of each pass since the last read
        self.clock: float | None = None  # when the last read came back
        self.warm = False  # the first run, its one-off work included, is not timed

    @property
    def observing(self) -> bool:
        """Whether the next bare step's outcome goes to the choice too."""
        return self.pending > 0

    def asks(self, state: BatchState) -> list[torch.Tensor]:
        """What the next read brings for the gate: the choice's (H,) `hope`, when it may have changed."""
        return [self.choice.hope(state)] if self.ask is not None and self.fresh else []

    def heard(self, values: Sequence[int]) -> None:
        """A read came back, `values` its part that `asks` asked for: keep the hope, time the passes run since the last."""
        now = time.perf_counter()
        if values:
            self.hope, self.fresh = list(values), False
        if self.timer is not None and self.passes and self.clock is not None:
            if self.warm:
                self.timer(self.passes, now - self.clock)
            self.warm = True
        self.passes, self.clock = [], now

    def ran(self, q: int, rows: int, kv: int, drafted: bool) -> None:
        """A pass of `rows` rows ran, q tokens each over kv slots; `drafted`: its step proposed (else a bare one)."""
        self.passes.append((q, rows, kv))
        self.fresh = self.fresh or drafted or self.pending > 0  # the choice chose, or observed
        self.pending = self.deepest + 1 if drafted else max(self.pending - 1, 0)

    def decide(self, rows: int, kv: int) -> None:
        """Whether the next step, of `rows` rows at `kv`, proposes: some draft may pay (`drafting`)."""
        self.drafting = self.ask is None or bool(self.ask(rows, kv, self.cells, self.hope))
