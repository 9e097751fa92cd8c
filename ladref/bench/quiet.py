"""Is this machine quiet enough to time on? Asked once before a benchmark run starts.

`machine_state` reads the 1-minute load average, then times a few one-token greedy steps of the
embedded model (the demo's probe, `ladref.bench.demo_rounds.probe`): the CPU share its threads got
(a process spinning on one of two cores leaves them about 0.65, a quiet machine 0.97-0.99 on
2 AMD EPYC cores) and how steady its steps were. `busy_reasons` says what makes it busy, if
anything: `benchmarks/current.py run` refuses such a machine, unless told `--force`, and then
stamps every result as measured on a busy machine.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import torch

from .protocol import Protocol

MAX_LOAD = 0.8
"""A 1-minute load average above this before a run: something else has been running (one busy core gives 1.0)."""
MIN_SHARE = Protocol().min_share
"""The probe's CPU share below this: its threads waited for a core (the protocol's own bound for a round)."""
MAX_SPREAD = 1.5
"""The probe's step times, upper quartile over lower, above this: unsteady (the demo's bound)."""


@dataclass(frozen=True)
class MachineState:
    """What the probe saw.

    Attributes:
        load: the 1-minute load average before the probe.
        share: the probe's CPU time over (wall time x threads).
        step_ms: its median one-token greedy step, ms.
        spread: upper quartile over lower of its step times.
        threads: the torch threads it ran on.
    """

    load: float
    share: float | None
    step_ms: float
    spread: float
    threads: int

    def busy_reasons(self) -> list[str]:
        """Why the machine looks busy; empty when it is quiet."""
        why = []
        if self.load > MAX_LOAD:
            why.append(f"the 1-minute load average is {self.load:.2f} (above {MAX_LOAD})")
        if self.share is not None and self.share < MIN_SHARE:
            why.append(f"greedy steps got {self.share:.0%} of {self.threads} cores' CPU time (below {MIN_SHARE:.0%})")
        if self.spread > MAX_SPREAD:
            why.append(f"one-token steps varied {self.spread:.2f}x between quartiles (above {MAX_SPREAD})")
        return why

    def as_dict(self) -> dict:
        return dict(asdict(self), busy=self.busy_reasons())


def machine_state(threads: int, tokens: int = 24) -> MachineState:
    """Load average, then `tokens` greedy steps of the embedded model on `threads` torch threads (CPU)."""
    from ..decoders.greedy import greedy_decode  # noqa: PLC0415 - only a probe loads the model
    from ..models import chat_ids, load_default_model  # noqa: PLC0415
    from .demo_rounds import probe  # noqa: PLC0415

    load = os.getloadavg()[0]
    torch.set_num_threads(threads)
    model, tokenizer = load_default_model("cpu")
    ids = chat_ids(tokenizer, "Write a Python function that reverses a list.")
    greedy = lambda prompt, n, _tok, streamer: greedy_decode(model, prompt, n, streamer=streamer)  # noqa: E731
    greedy(ids, 4, None, None)  # warm
    found = probe(greedy, ids, tokens, threads=threads)
    return MachineState(round(load, 2), None if found.share is None else round(found.share, 3),
                        round(1e3 * found.step_s, 2), round(found.spread, 3), threads)
