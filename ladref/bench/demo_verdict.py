"""What the demo concludes from its times: each call's time predicted from the cost curve, whether the
measured times agree with those predictions and with each other, and what the speed-up means.

A step that feeds more tokens never costs less, so a measured t(q) that falls from one width to the
next shows the measurement's noise: `monotone_fit` pools such neighbours (the least-squares
non-decreasing fit), `curve_noise` is the largest such fall, `draft_cost_line` gives the threshold
t(2) / t(1) - 1 only where it exceeds that noise, and `verdict` reads the fitted curve. `withheld`
says why no verdict can be given: a single round, rounds whose speed-ups differ by more than
`ladref.bench.demo_rounds.LOOSE`, or times further than `AGREE` from their prediction (`agreement`).
`adaptive_reasons` says why adaptive decoding fed what it fed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..pricing.cost import CostModel
from ..batched.policy import BatchPolicy
from ..results import DecodeResult
from .demo_rounds import LOOSE, Rounds

AGREE = 1.5  # a measured time further than this factor from its prediction: the machine was busy
SHOWN_WIDTHS = (2, 4, 8, 16, 32)
TRUST = "trust what load cannot change: the identical output, S and the tokens fed per step"


def monotone_fit(values: Sequence[float]) -> list[float]:
    """The least-squares non-decreasing fit of `values` (pool adjacent violators): equal to
    `values` where they never fall, their mean over each run that does."""
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for value in values:
        mean, count = float(value), 1
        while blocks and blocks[-1][0] > mean:
            before, n = blocks.pop()
            mean, count = (before * n + mean * count) / (n + count), n + count
        blocks.append((mean, count))
    return [mean for mean, count in blocks for _ in range(count)]


def curve_noise(values: Sequence[float]) -> float:
    """The largest fall from one value to the next, relative to the first (0.0 when none falls)."""
    return max((max(0.0, (a - b) / a) for a, b in zip(values, values[1:]) if a > 0), default=0.0)


def fitted(cost: CostModel, kv: float) -> tuple[CostModel, float]:
    """The curve at KV length `kv`, fitted non-decreasing in q, and the noise the measured one shows (`curve_noise`)."""
    measured = [cost.time(q, kv) for q in cost.widths]
    return CostModel.from_times(dict(zip(cost.widths, monotone_fit(measured))), label=cost.label), curve_noise(measured)


def draft_cost_line(cost: CostModel, kv: float) -> str:
    """One line: the curve at KV length `kv` in one-token steps (fitted non-decreasing), and what a
    draft must carry to pay, unless the curve's noise is as large as that cost."""
    fit, noise = fitted(cost, kv)
    curve = ", ".join(f"t({q}) = {fit.relative(q):.2f}" for q in SHOWN_WIDTHS if q <= fit.max_width)
    line = f"  cost here, in one-token steps: {curve or 't(1) only'}"
    if noise > 0:
        line += (f" (fitted non-decreasing: the measured curve falls by up to {noise:.0%} from one width to the next, "
                 "which only measurement noise does)")
    if fit.max_width == 1:
        return line
    q = fit.widths[1]
    extra = fit.relative(q) - 1
    if extra <= noise == 0:
        return line + f": t({q}) equals t(1), so a draft costs nothing more here"
    if extra <= noise:
        return line + f"; t({q}) is within that noise of t(1), so no threshold for a draft is given"
    return line + f": a draft pays only if it carries about {extra:.2f} more accepted tokens than none"


def predicted_seconds(result: DecodeResult, cost: CostModel, prompt_tokens: int) -> float:
    """What `cost` says the call should take: the prefill, then each step's width at its KV length."""
    kv = prompt_tokens - 1  # the prefill caches the prompt but its last token, which the first step feeds
    seconds = cost.time(min(kv, cost.max_width), 0) if kv else 0.0
    for fed, accepted in zip(result.stats.forward_tokens_per_step, result.stats.accepted_per_step):
        seconds += cost.time(min(fed, cost.max_width), kv)
        kv += accepted
    return seconds


def agreement(measured: dict[str, float], predicted: dict[str, float]) -> str | None:
    """None when every measured time and speed-up is within `AGREE` of its prediction; else why not."""
    off = [f"{name} {measured[name]:.2f} s against {predicted[name]:.2f} s predicted" for name in measured
           if not 1 / AGREE <= measured[name] / predicted[name] <= AGREE]
    base = measured["greedy"] / predicted["greedy"]
    off += [f"{name}'s speed-up {measured['greedy'] / measured[name]:.2f}x against {predicted['greedy'] / predicted[name]:.2f}x"
            for name in measured if not 1 / AGREE <= (measured[name] / predicted[name]) / base <= AGREE]
    return "; ".join(off) or None


def verdict(model, result: DecodeResult, cost: CostModel, measured: float, predicted: float, kv: float) -> str:
    """What the time ratio means here: S against the cost of a wide step in narrow steps at KV
    length `kv` (the curve fitted non-decreasing), then the `measured` speed-up of lookahead over
    greedy (which decides the last sentence) beside the one the cost curve `predicted` for these steps."""
    fit, _ = fitted(cost, kv)
    q = min(round(result.stats.mean_forward_tokens), fit.max_width)
    ratio, s = fit.relative(q), result.stats.compression
    line = (f"on this {model.device.type.upper()}: a {q}-token step costs {ratio:.1f} one-token steps "
            f"(t({q}) = {1e3 * fit.time(q):.0f} ms, t(1) = {1e3 * fit.time(1):.0f} ms), so lookahead wins only "
            f"where S > {ratio:.1f}; with S = {s:.2f} expect about {s / ratio:.2f}x (the curve, step by step: {predicted:.2f}x).")
    if measured < 1:
        return line + f" Measured: {measured:.2f}x, so here fixed-width lookahead is slower than greedy decoding."
    return line + f" Measured: {measured:.2f}x, so here lookahead decoding pays off."


def withheld(rounds: Rounds, disagreement: str | None, stored: Path | None) -> str | None:
    """Why no speed verdict can be given (None: it can): one round, rounds that disagree, or times
    that disagree with the cost curve (`disagreement`, from `agreement`); `stored`: the file the
    curve came from (None: measured for this run only)."""
    if len(rounds.times) < 2:
        return (f"no speed verdict from a single round ({rounds.stop}): only a second one shows whether the speed "
                f"held steady; {TRUST}.")
    if rounds.spread() > LOOSE:
        return (f"no speed verdict: the speed-ups differ by {rounds.spread() - 1:.0%} between rounds (more than "
                f"{LOOSE - 1:.0%}), so this machine's speed changed while they ran; {TRUST}; rerun on an idle machine.")
    if disagreement is None:
        return None
    again = ("" if stored is None else
             f" (if it is idle now, the stored curve was measured busy: delete {stored} and it is measured again)")
    return (f"no speed verdict: the timings disagree with this machine's cost curve by more than {AGREE}x ({disagreement}), "
            f"so the machine was busy while they ran or while the curve was measured. {TRUST[0].upper() + TRUST[1:]}; rerun "
            f"on an idle machine for the times{again}.")


def adaptive_reasons(cost: CostModel, policy: BatchPolicy, result: DecodeResult, kv: float) -> str:
    """Two lines: the cost curve it weighed (at KV length `kv`, `draft_cost_line`), and the acceptance
    `policy` learned in the call that gave `result` (row 0: one prompt; and what it then fed)."""
    stats, acceptance = result.stats, policy.acceptance
    sources, evidence, depth, ranks = acceptance.dims
    prior_a, prior_b = policy.settings.prior
    accepted = acceptance.accepted[0].view(sources, evidence, depth, ranks)[:, :, 1, 0] - prior_a  # first draft token, rank 0
    reached = acceptance.reached[0].view(sources, evidence, depth, ranks)[:, :, 1, 0] - prior_b
    counts = {name: (float(a), float(n)) for name, a, n in zip(policy.names, accepted.sum(1), reached.sum(1))}
    rates = {s: f"{s} {a / n:.0%} of {int(n)} checks" for s, (a, n) in counts.items() if n}
    drafted = sum(d > 0 for d in stats.draft_tokens_per_step)
    windowed = sum(w > 0 for w in stats.window_tokens_per_step)
    return (f"{draft_cost_line(cost, kv)}\n"
            f"  acceptance of each source's first draft token, checked on every step: {'; '.join(rates.values()) or 'none yet'}; "
            f"so it drafted on {drafted} of {stats.steps} steps (the window on {windowed}), {stats.mean_forward_tokens:.1f} tokens per step")
