"""The demo's timing: is this machine steady now, how much work fits, and interleaved rounds that stop in time.

`probe` times a few one-token greedy steps (their median, their spread, and the share of CPU time
the process got: on a busy machine its threads wait for a core); `Probe.busy` says why a machine
looks busy, and `thread_fit` how many torch threads the cores left free can run; `plan_tokens` sizes the token budget to the time left; `timed_rounds` runs the
decoders interleaved (the order reversed every other round), stops once two rounds' speed ratios
agree within `TIGHT`, before a round that would not end by the deadline, or when a call passes it
(`OutOfTime`, raised by the `StepTimes` streamer every call gets); `steadiness` and `busy_now` say
what the probe found. Every clock is a parameter, so tests run it with fake timers and fake decoders.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from ..results import DecodeResult

Clock = Callable[[], float]

QUIET_LIMIT_S = 100.0  # the whole demo on a steady machine, a cost curve measured in this run included
BUSY_LIMIT_S = 240.0  # the whole demo on a busy machine, with the model's loading: within 5 minutes
DEFAULT_TOKENS, BUSY_TOKENS, MIN_TOKENS = 64, 32, 16
PROBE_TOKENS, PROBE_S = 16, 8.0  # the probe's steps, and its time at most
ROUND_STEPS = 4.0  # a round of greedy, lookahead and adaptive costs about this many one-token steps per token
WARM_UP_STEPS = 20  # lookahead's and adaptive's warm-up (8 tokens each), in one-token steps
TIGHT = 1.05  # two rounds whose speed ratios agree this closely: no further round
LOOSE = 1.10  # rounds whose speed ratios spread wider: no verdict
MIN_SHARE = 0.6  # the probe's threads got less of the CPU than this: other processes held the cores
MAX_SPREAD = 1.5  # the probe's step times, upper quartile over lower, above this: unsteady


class OutOfTime(Exception):
    """A timed call passed the demo's deadline."""


class StepTimes:
    """A streamer that keeps when each token arrived and raises `OutOfTime` past `deadline`.

    Args:
        clock: the timer (seconds).
        deadline: the `clock` value after which a call stops (inf: never).
    """

    def __init__(self, clock: Clock = time.perf_counter, deadline: float = math.inf) -> None:
        self.clock, self.deadline, self.arrivals, self.prompt_seen = clock, deadline, [], False

    def put(self, value: object) -> None:
        """The prompt first (ignored), then each accepted token: its time kept, the deadline checked."""
        now = self.clock()
        if self.prompt_seen:
            self.arrivals.append(now)
        self.prompt_seen = True
        if now > self.deadline:
            raise OutOfTime

    def end(self) -> None:
        """Nothing to close."""

    def intervals(self) -> list[float]:
        """Seconds between consecutive tokens (for greedy decoding: one step each)."""
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]


Decode = Callable[[torch.Tensor, int, object, StepTimes], DecodeResult]  # (prompt, tokens, tokenizer, streamer)


@dataclass(frozen=True)
class Probe:
    """A few one-token greedy steps, timed.

    Attributes:
        step_s: the median step, seconds.
        spread: the upper quartile of the step times over the lower one (1.0: every step alike).
        share: CPU time the process got over wall time times its torch threads (None off a CPU).
    """

    step_s: float
    spread: float
    share: float | None

    def busy(self, expected_s: float | None) -> list[str]:
        """Why the machine looks busy (empty: steady): its threads got too little of the CPU, its
        steps varied too much, or they took more than 1.5x `expected_s`, t(1) of the cost curve (if any)."""
        why = []
        if self.share is not None and self.share < MIN_SHARE:
            why.append(f"its threads got {self.share:.0%} of the CPU time an idle machine gives them")
        if self.spread > MAX_SPREAD:
            why.append(f"one-token steps varied {self.spread:.2f}x between quartiles")
        if expected_s is not None and self.step_s > 1.5 * expected_s:  # (much faster: the curve was measured busy)
            why.append(f"a one-token step took {1e3 * self.step_s:.0f} ms against {1e3 * expected_s:.0f} ms in the stored cost curve")
        return why


def quartile_spread(times: list[float]) -> float:
    """Upper quartile over lower quartile of `times` (1.0 for fewer than 2)."""
    if len(times) < 2:
        return 1.0
    low, _, high = statistics.quantiles(times, n=4)
    return high / low if low > 0 else math.inf


def probe(greedy: Decode, prompt: torch.Tensor, tokens: int = PROBE_TOKENS, *, threads: int | None,
          max_seconds: float = PROBE_S, clock: Clock = time.perf_counter, cpu_clock: Clock = time.process_time) -> Probe:
    """Time `tokens` greedy steps, or those that end within `max_seconds` (also the greedy decoder's warm-up).

    Args:
        greedy: the greedy decoder, called as ``greedy(prompt, tokens, None, streamer)``.
        prompt: the prompt's ids.
        tokens: tokens to decode, at least 3.
        threads: torch's CPU threads, for the CPU share; None off a CPU (no share).
        max_seconds: the call stops after this long (a busy machine shows itself in a few slow steps).
        clock: the wall-clock timer.
        cpu_clock: the process's CPU-time timer.
    """
    if tokens < 3:
        raise ValueError(f"the probe needs at least 3 tokens (2 step times), got {tokens}")
    wall, cpu = clock(), cpu_clock()
    streamer = StepTimes(clock, wall + max_seconds)
    try:
        greedy(prompt, tokens, None, streamer)
    except OutOfTime:
        pass
    wall, cpu = clock() - wall, cpu_clock() - cpu
    steps = streamer.intervals() or [wall / max(1, len(streamer.arrivals))]  # one token only: the call's mean
    share = None if threads is None or wall <= 0 else cpu / (wall * threads)
    return Probe(statistics.median(steps), quartile_spread(steps), share)


def thread_fit(found: Probe, threads: int) -> int:
    """The torch threads to go on with: `threads`, or when the probe's threads got less than `MIN_SHARE`
    of the CPU (other processes hold the cores) as many as the share they got, at least 1. Threads
    that wait for a core make every parallel operation wait with them, so fewer threads run faster there."""
    if found.share is None or found.share >= MIN_SHARE or threads <= 1:
        return threads
    return max(1, int(threads * found.share))


def plan_tokens(requested: int | None, busy: bool, step_s: float, seconds_left: float) -> int:
    """The token budget: `requested` when given; else `DEFAULT_TOKENS` (`BUSY_TOKENS` on a busy
    machine), fewer (`MIN_TOKENS` at least) when the warm-up and two rounds at `step_s` a one-token
    step would not fit in `seconds_left`."""
    if requested is not None:
        return requested
    fits = int((seconds_left - WARM_UP_STEPS * step_s) / (2 * ROUND_STEPS * step_s)) if step_s > 0 else DEFAULT_TOKENS
    return max(MIN_TOKENS, min(BUSY_TOKENS if busy else DEFAULT_TOKENS, fits))


@dataclass
class Rounds:
    """Complete interleaved rounds.

    Attributes:
        times: per round, {decoder: wall seconds}.
        results: per round, {decoder: its result}.
        stop: why no further round ran.
    """

    times: list[dict[str, float]]
    results: list[dict[str, DecodeResult]]
    stop: str

    def ratios(self, name: str) -> list[float]:
        """Greedy's time over `name`'s, each measured in the same round: `name`'s speed-up per round."""
        return [t["greedy"] / t[name] for t in self.times]

    def spread(self) -> float:
        """The widest spread of any decoder's per-round speed-up, max over min (1.0 for one round)."""
        return max((max(r) / min(r) for r in map(self.ratios, self.times[0]) if len(r) > 1), default=1.0)

    def fastest(self) -> int:
        """The index of the round with the least time in all (the least disturbed)."""
        return min(range(len(self.times)), key=lambda r: sum(self.times[r].values()))


def timed_rounds(decoders: Mapping[str, Decode], prompt: torch.Tensor, tokens: int, max_rounds: int, deadline: float, *,
                 first_deadline: float = math.inf, tokenizer: object = None, clock: Clock = time.perf_counter,
                 say: Callable[[str], None] = print) -> Rounds:
    """Up to `max_rounds` rounds of every decoder (the order reversed every other round).

    Args:
        decoders: {name: decode}, "greedy" among them; called as ``decode(prompt, tokens, tokenizer, streamer)``.
        prompt: the prompt's ids.
        tokens: tokens each call decodes.
        max_rounds: rounds at most.
        deadline: the `clock` value by which the rounds after the first must end (a call past it is dropped with its round).
        first_deadline: the same for the first round (default none: it always ends, so there is an output to show).
        tokenizer: passed to every call (for the text).
        clock: the timer.
        say: where each round's line goes.
    """
    times, results, stop = [], [], f"{max_rounds} round{'s' if max_rounds > 1 else ''}"
    for r in range(max_rounds):
        if r and clock() + 1.1 * sum(times[-1].values()) > deadline:
            stop = f"no time for round {r + 1} within the demo's time limit"
            break
        order = list(decoders) if r % 2 == 0 else list(decoders)[::-1]
        try:
            done = {name: decoders[name](prompt, tokens, tokenizer, StepTimes(clock, deadline if r else first_deadline))
                    for name in order}
        except OutOfTime:
            stop = f"round {r + 1} ran past the demo's time limit and was dropped"
            break
        times.append({name: done[name].stats.wall_time_s for name in decoders})
        results.append({name: done[name] for name in decoders})
        say(f"  round {r + 1}: " + "; ".join(f"{name} {times[-1][name]:.1f} s" for name in order) + " ("
            + ", ".join(f"{name} {times[-1]['greedy'] / times[-1][name]:.2f}x" for name in decoders if name != "greedy")
            + " greedy's speed)")
        rounds = Rounds(times, results, stop)
        if r and rounds.spread() <= TIGHT:
            rounds.stop = f"the {r + 1} rounds' speed-ups agree within {TIGHT - 1:.0%}"
            return rounds
    return Rounds(times, results, stop)


def steadiness(found: Probe, busy: list[str], device: torch.device) -> str:
    """The probe's line: the median one-token step, its spread, the CPU share, and steady or busy."""
    share = "" if found.share is None else f", its threads got {found.share:.0%} of the CPU"
    return (f"{1e3 * found.step_s:.0f} ms a step on this {device.type.upper()} (quartiles {found.spread:.2f}x apart{share}): "
            + ("BUSY" if busy else "steady"))


def busy_now(why: list[str], tokens: int, rounds: int) -> str:
    """What the demo does on a machine the probe found busy, said before the timed work starts."""
    return (f"this machine is busy now ({'; '.join(why)}): the timed work is {tokens} tokens and at most {rounds} "
            f"round{'s' if rounds > 1 else ''}, so that the demo ends within 5 minutes, and "
            "its speed verdict is withheld or qualified; the output, S and the tokens fed per step do not depend on load.")
