"""The settings of adaptive decoding's policy (`ladref.batched.policy.BatchPolicy`): priors, the window's source, calibration.

Shared by every decoder that chooses its steps (the batched engine, eager or over compiled steps,
and the captured program). The rule itself, one prompt at a time and written to be read, is the
tests' oracle (``tests/oracle_policy.py``); `BatchPolicy` is its tensor twin.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicySettings:
    """How the policy weighs its evidence (the machine's facts are the policy's own fields).

    Args:
        prior: (accepted, reached) pseudo-counts of every rate before any evidence (mean a/b).
        window_bonus: the floor of the window's value in tokens per step (> 0: fed when free).
        window_source: the source whose drafts the window keeps fresh (the lookahead pool); the
            window's value is the tokens per step that source's drafts recently won beyond the
            other sources' drafts of the same steps.
        calibrate: correct the cost by the measured time of every pass;
            off for a synthetic curve that must be taken as it is.
        smoothing: the weight of each new timing in the running corrections (0 < smoothing <= 1).
        explore: where only the rates learned so far say no draft can pay (a node worth a whole
            token could), a step still proposes after 1, 2, 4, ... such steps, `explore` at most:
            rates learn only from proposals.

    Raises:
        ValueError: a prior not 0 < accepted < reached, smoothing outside (0, 1], or explore below 1.
    """

    prior: tuple[float, float] = (1.0, 3.0)
    window_bonus: float = 0.05
    window_source: str = "lookahead"
    calibrate: bool = False
    smoothing: float = 0.2
    explore: int = 16

    def __post_init__(self) -> None:
        a, b = self.prior
        if not 0 < a < b:
            raise ValueError(f"prior must be (accepted, reached) with 0 < accepted < reached, got {self.prior}")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {self.smoothing}")
        if not (isinstance(self.explore, int) and self.explore >= 1):
            raise ValueError(f"explore must be an int >= 1, got {self.explore!r}")
