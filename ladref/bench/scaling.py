"""The lookahead scaling law: steps against per-step tokens, for growing W at fixed N.

The paper's claim (Fu et al., 2024, section 4): when N is large enough, growing the window W
(with G = W) exponentially reduces the number of decoding steps linearly, i.e. S grows about
linearly in log(per-step tokens). `scaling_sweep` measures S for a grid of (W, N),
`fit_log_linear` fits S = a + b * log2(per-step tokens) per N, and `plot_scaling` draws it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..decoders.methods import lookahead_decode
from .figures import log2_axis, panels, save

DEFAULT_WINDOWS = (1, 2, 4, 8, 16)
DEFAULT_NGRAMS = (3, 5, 7)


@dataclass(frozen=True)
class ScalingPoint:
    """Lookahead decoding at one (W, N, G) summed over a prompt set.

    Attributes:
        window: W.
        ngram: N.
        candidates: G.
        tokens: tokens generated over all prompts (the same as greedy's: one per greedy step).
        steps: lookahead steps over all prompts.
        forward_tokens: tokens fed to the model over all steps.
    """

    window: int
    ngram: int
    candidates: int
    tokens: int
    steps: int
    forward_tokens: int

    @property
    def step_tokens(self) -> int:
        """(N-1) * (W+G), the most tokens one step feeds the model (the x-axis of the law)."""
        return (self.ngram - 1) * (self.window + self.candidates)

    @property
    def compression(self) -> float:
        """S = tokens / steps (greedy has S = 1)."""
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def mean_forward_tokens(self) -> float:
        """Measured mean tokens per step (<= step_tokens when fewer than G candidates match)."""
        return self.forward_tokens / self.steps if self.steps else 0.0


def scaling_sweep(
    model: torch.nn.Module,
    prompts: Sequence[torch.Tensor | list[int]],
    windows: Iterable[int] = DEFAULT_WINDOWS,
    ngrams: Iterable[int] = DEFAULT_NGRAMS,
    max_new_tokens: int = 64,
    *,
    candidates: Callable[[int], int] | None = None,
    on_point: Callable[[ScalingPoint], None] | None = None,
) -> list[ScalingPoint]:
    """Run lookahead decoding for every (W, N) on every prompt and total tokens and steps.

    Args:
        model: a transformers decoder-only model.
        prompts: prompt ids, each (L,) / (1, L) tensor or list of ints.
        windows: the W values.
        ngrams: the N values.
        max_new_tokens: tokens per prompt.
        candidates: G as a function of W; default G = W (the paper's sweep).
        on_point: called with each point as soon as it is measured (e.g. to show progress).

    Returns:
        One `ScalingPoint` per (N, W), N-major.
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("scaling_sweep needs at least one prompt")
    pick = (lambda w: w) if candidates is None else candidates
    points = []
    for n in ngrams:
        for w in windows:
            config = LookaheadConfig(window_size=w, ngram_size=n, max_candidates=pick(w))
            tokens = steps = fed = 0
            for prompt in prompts:
                stats = lookahead_decode(model, prompt, max_new_tokens, config=config).stats
                tokens, steps, fed = tokens + stats.new_tokens, steps + stats.steps, fed + sum(stats.forward_tokens_per_step)
            point = ScalingPoint(w, n, config.max_candidates, tokens, steps, fed)
            points.append(point)
            if on_point is not None:
                on_point(point)
    return points


@dataclass(frozen=True)
class LogLinearFit:
    """S = intercept + slope * log2(step_tokens), least squares over one N's points.

    Attributes:
        ngram: N.
        slope: gain in S per doubling of per-step tokens.
        intercept: S extrapolated to one token per step.
        r2: coefficient of determination (1 = perfectly linear in log2).
    """

    ngram: int
    slope: float
    intercept: float
    r2: float


def fit_log_linear(points: Iterable[ScalingPoint]) -> dict[int, LogLinearFit]:
    """Fit S against log2(per-step tokens) separately for each N (needs >= 2 W values per N)."""
    by_n: dict[int, list[ScalingPoint]] = {}
    for p in points:
        by_n.setdefault(p.ngram, []).append(p)
    fits = {}
    for n, group in sorted(by_n.items()):
        xs = [math.log2(p.step_tokens) for p in group]
        ys = [p.compression for p in group]
        if len(set(xs)) < 2:
            raise ValueError(f"N={n} needs at least two different per-step token counts to fit a line")
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        intercept = my - slope * mx
        ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
        ss_tot = sum((y - my) ** 2 for y in ys)
        fits[n] = LogLinearFit(n, slope, intercept, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)
    return fits


def plot_scaling(points: Sequence[ScalingPoint], path: str | Path, title: str = "Lookahead scaling law") -> Path:
    """Save S and steps against per-step tokens (log2 axis), one line per N, as an image.

    Uses matplotlib's object API with the Agg canvas (no global backend switch, no display).

    Args:
        points: the output of `scaling_sweep`.
        path: where to write (the suffix picks the format, e.g. .png); parent folders are created.
        title: figure title.

    Returns:
        The path written.
    """
    if not points:
        raise ValueError("plot_scaling needs at least one point")
    fig, ax_s, ax_steps = panels()
    for n in sorted({p.ngram for p in points}):
        group = sorted((p for p in points if p.ngram == n), key=lambda p: p.step_tokens)
        xs = [p.step_tokens for p in group]
        ax_s.plot(xs, [p.compression for p in group], marker="o", label=f"N={n}")
        ax_steps.plot(xs, [p.steps for p in group], marker="o", label=f"N={n}")
        for p in group:
            ax_s.annotate(f"W={p.window}", (p.step_tokens, p.compression), fontsize=7, textcoords="offset points", xytext=(3, 3))
    for ax, label in ((ax_s, "S = tokens / step"), (ax_steps, "decoding steps (all prompts)")):
        log2_axis(ax, "per-step tokens (N-1)(W+G), log2 scale", label, legend_size=None)
        ax.legend()
    return save(fig, path, title)
