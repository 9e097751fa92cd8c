"""The measurement protocol every timed benchmark follows: rounds, interference, intervals.

A comparison is only worth its rerun. So every (prompt, method) is timed in several *rounds*,
the methods interleaved with their order rotated each round, and each timed call is a `Sample`
that keeps what could have disturbed it: the process's CPU time (its share of the cores) and
the machine's 1-minute load average.

1. A sample is *disturbed* when its CPU share (CPU time / (wall time x threads)) is below
   `Protocol.min_share` (other processes held the cores), or when its time a step is more than
   `Protocol.off` from the median of its (prompt, method)'s samples (the lower middle of an even
   count: interference only slows a call, so of two that disagree the slower is the suspect).
2. A (prompt, method) is *settled* once it has `min_rounds` undisturbed samples that agree within
   `Protocol.agree`. Until then it is measured again, at most `max_rounds` times in all.
3. Its figure is the median of its undisturbed samples; a (prompt, method) that never settles
   is *flagged*: kept in the record, counted in the summary, never silently published.

Per method, over prompts: the geometric mean of per-prompt speedups with a percentile bootstrap
95% interval (prompts resampled, a fixed seed, so a rerun of the same figures gives the same
interval), and the pooled speedup (total tokens / total time) beside it. Every clock is a
parameter: the tests run the protocol on synthetic timings.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True)
class Protocol:
    """How many rounds, and what counts as disturbed.

    Attributes:
        min_rounds: rounds every (prompt, method) is timed at least.
        max_rounds: rounds at most (re-measuring included).
        agree: settled when `min_rounds` undisturbed samples lie within this fraction of their median.
        off: a sample whose time a step is further than this from its other samples' median is disturbed.
        min_share: a sample whose CPU share is below this is disturbed (its threads waited for a core).
            SmolLM2 on 2 quiet AMD EPYC cores gets 0.97-0.99 (torch's threads spin while they wait),
            0.63-0.67 beside one process spinning on a core, its calls 3x slower.
        threads: the torch threads the timed work runs on (the share's denominator).
    """

    min_rounds: int = 2
    max_rounds: int = 5
    agree: float = 0.10
    off: float = 0.15
    min_share: float = 0.8
    threads: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"need 1 <= min_rounds <= max_rounds, got {self.min_rounds} and {self.max_rounds}")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")


@dataclass(frozen=True)
class Sample:
    """One timed call.

    Attributes:
        wall_s: its wall time, seconds.
        cpu_s: the process's CPU time over the call (every thread), seconds.
        load: the machine's 1-minute load average when it started.
        steps: its decoding steps (the per-step time is what rounds are compared by).
    """

    wall_s: float
    cpu_s: float
    load: float
    steps: int = 1

    @property
    def step_s(self) -> float:
        return self.wall_s / max(1, self.steps)

    def share(self, threads: int) -> float:
        """CPU time over (wall time x threads): near 1 (or above, spinning threads) when the cores were free."""
        return self.cpu_s / (self.wall_s * threads) if self.wall_s > 0 else 1.0


def load_average() -> float:
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def timed(call: Callable[[], object], *, clock: Clock = time.perf_counter, cpu_clock: Clock = time.process_time,
          load: Callable[[], float] = load_average) -> tuple[object, Sample]:
    """Run `call` once: (its result, its `Sample`, of one step: ``dataclasses.replace(sample, steps=k)`` sets them)."""
    before = load()
    wall, cpu = clock(), cpu_clock()
    result = call()
    return result, Sample(clock() - wall, cpu_clock() - cpu, before)


def _middle(times: Sequence[float]) -> float:
    """The median, the lower middle one of an even count: a time that was measured (interference only slows)."""
    ordered = sorted(times)
    return ordered[(len(ordered) - 1) // 2]


def disturbed(samples: Sequence[Sample], protocol: Protocol) -> list[bool]:
    """Rule 1 for each sample: a low CPU share, or a time a step further than `off` from its samples'
    median (the lower middle of an even count: of two that disagree, the slower is the suspect)."""
    middle = _middle([s.step_s for s in samples]) if samples else 0.0
    return [s.share(protocol.threads) < protocol.min_share or abs(s.step_s / middle - 1) > protocol.off for s in samples]


def settled(samples: Sequence[Sample], protocol: Protocol) -> bool:
    """Rule 2: `min_rounds` undisturbed samples that agree within `agree` (the slowest over the fastest of them)."""
    good = sorted(s.step_s for s, bad in zip(samples, disturbed(samples, protocol)) if not bad)
    k = protocol.min_rounds
    return any(good[i + k - 1] <= good[i] * (1 + protocol.agree) for i in range(len(good) - k + 1))


def figure(samples: Sequence[Sample], protocol: Protocol) -> Sample:
    """Rule 3: the median undisturbed sample (of all samples when every one is disturbed); the lower
    middle one of an even count, so the figure is a sample that was measured."""
    flags = disturbed(samples, protocol)
    pool = [s for s, bad in zip(samples, flags) if not bad] or list(samples)
    return sorted(pool, key=lambda s: s.step_s)[(len(pool) - 1) // 2]


def rounds(methods: Sequence[str], measure: Callable[[str], Sample], protocol: Protocol, *,
           shift: int = 0) -> dict[str, list[Sample]]:
    """Time every method in interleaved rounds until each is settled or has `max_rounds` samples.

    Args:
        methods: the rows, in their first order.
        measure: times one call of a method, returning its `Sample` (the steps filled in).
        protocol: the rules.
        shift: rotates the first round's order (the prompt's index: every method goes first in turn).

    Returns:
        Each method's samples, in the order they were taken.
    """
    if not methods:
        raise ValueError("rounds needs at least one method")
    samples: dict[str, list[Sample]] = {m: [] for m in methods}
    for round_ in range(protocol.max_rounds):
        todo = [m for m in methods if len(samples[m]) < protocol.min_rounds or not settled(samples[m], protocol)]
        if not todo:
            break
        k = (shift + round_) % len(todo)
        for method in todo[k:] + todo[:k]:
            samples[method].append(measure(method))
    return samples


def geometric_mean(values: Sequence[float]) -> float:
    if not values or min(values) <= 0:
        raise ValueError(f"a geometric mean needs positive values, got {list(values)[:5]}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def bootstrap_interval(values: Sequence[float], *, resamples: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the geometric mean of `values` (one per prompt).

    The prompts are resampled with replacement `resamples` times with a fixed `seed`, so the same
    values always give the same interval. One value gives (value, value).
    """
    if len(values) == 1:
        return (values[0], values[0])
    rng, logs = random.Random(seed), [math.log(v) for v in values]
    means = sorted(math.exp(sum(rng.choices(logs, k=len(logs))) / len(logs)) for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * (resamples - 1))], means[math.ceil((1 - tail) * (resamples - 1))]


@dataclass(frozen=True)
class Speedup:
    """One method against a baseline, over the same prompts.

    Attributes:
        geomean: the geometric mean of per-prompt speedups (tokens/s over the baseline's).
        low, high: its 95% bootstrap interval over prompts.
        pooled: total tokens / total time over the baseline's.
        prompts: prompts compared.
    """

    geomean: float
    low: float
    high: float
    pooled: float
    prompts: int

    def text(self) -> str:
        """"1.23x [1.10, 1.37]"."""
        return f"{self.geomean:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def speedup(mine: Sequence[tuple[int, float]], base: Sequence[tuple[int, float]]) -> Speedup:
    """`Speedup` of (tokens, seconds) per prompt against the baseline's (tokens, seconds), prompt for prompt."""
    if len(mine) != len(base) or not mine:
        raise ValueError(f"{len(mine)} prompts against a baseline of {len(base)}: compare the same prompts")
    ratios = [(t / s) / (bt / bs) for (t, s), (bt, bs) in zip(mine, base)]
    pooled = (sum(t for t, _ in mine) / sum(s for _, s in mine)) / (sum(t for t, _ in base) / sum(s for _, s in base))
    low, high = bootstrap_interval(ratios)
    return Speedup(geometric_mean(ratios), low, high, pooled, len(ratios))
