"""Pick (W, N, G) for this machine from what decoding actually pays.

A lookahead step feeds q = (N-1)(W+g) tokens and yields S tokens on average, so its speedup over
greedy is predicted as ``S * t(1) / t(q)`` with t(q) the time of a q-token forward pass (flat
while the hardware is underused, as on a GPU; on a CPU it grows within a few tokens:
docs/cost_model.md). `recommend` measures t(q) with `ladref.pricing.cost.CostModel` for a few block sizes
and, for a few candidate configs, S and the wall-clock time of real decoding with greedy
interleaved on the same prompts; it recommends the config *measured* fastest among those faster
than greedy, and greedy decoding (``config=None``) when none was.

What decoding pays: every lookahead step has a new (q, past + q) shape, so t(q) is timed on a
KV-cache length never used before (a kernel that plans per shape, such as cuDNN attention,
pays its planning cost in each timing, as it does in each decoding step), and the choice rests
on measured decoding time, not on the prediction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..config import LookaheadConfig, check_int
from ..pricing.cost import CostModel
from ..decoders.greedy import greedy_decode
from ..decoders.methods import lookahead_decode

DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
# candidates per device type: small windows where wide steps cost more (CPU), wide ones where
# they cost about as much as narrow ones (GPU: the paper's 7/5/7 .. 15/5/15 range and beyond)
DEFAULT_CONFIGS = {
    "cpu": tuple(LookaheadConfig(w, n, g) for w, n, g in ((2, 3, 2), (4, 3, 4), (4, 4, 4), (6, 4, 6), (8, 5, 8))),
    "cuda": tuple(LookaheadConfig(w, n, g) for w, n, g in ((7, 5, 7), (10, 5, 10), (15, 5, 15), (15, 7, 15), (20, 5, 20))),
}
Progress = Callable[[str], None]


def default_configs(device: torch.device) -> tuple[LookaheadConfig, ...]:
    """The candidate configs `recommend` tries on this device type (CPU's for unknown types)."""
    return DEFAULT_CONFIGS.get(device.type, DEFAULT_CONFIGS["cpu"])


def measure_forward_cost(model: torch.nn.Module, block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
                         context: int = 256, repeats: int = 5, attention_backend: str = "auto") -> dict[int, float]:
    """t(q): median of `repeats` forward passes over q new tokens after about `context` cached ones, in seconds.

    `ladref.pricing.cost.CostModel.measure` at one KV length (the one way ladref times a step): each pass
    runs on a cache length no other pass of its width used (context, context + 1, ...), so its
    (q, past + q) shape is new, as every decoding step's is; an untimed pass per width first
    absorbs one-time costs (CUDA context, kernel loading).

    Returns:
        {q: seconds} for each block size.
    """
    if not block_sizes:
        raise ValueError("block_sizes must not be empty")
    for q in block_sizes:
        check_int("each block size q", q, 1)
    check_int("repeats", repeats, 1)
    check_int("context", context, 1)
    cost = CostModel.measure(model, sorted(set(block_sizes) | {1}), (context,), repeats, attention_backend=attention_backend)
    return {q: t for q, t in cost.times().items() if q in block_sizes}


def interpolate_cost(costs: dict[int, float], q: float) -> float:
    """t(q) by linear interpolation between measured block sizes (linear extrapolation outside).

    A rule of thumb for a few measured points; `ladref.pricing.cost.CostModel` is the cost model decoding
    uses (it refuses widths it has not measured rather than extrapolate).
    """
    if not costs:
        raise ValueError("no forward costs measured")
    sizes = sorted(costs)
    if len(sizes) == 1:
        return costs[sizes[0]] * max(q, 1) / sizes[0]
    lo, hi = sizes[0], sizes[1]
    for a, b in zip(sizes, sizes[1:]):
        lo, hi = a, b
        if q <= b:
            break
    return max(costs[lo] + (costs[hi] - costs[lo]) * (q - lo) / (hi - lo), 1e-12)


@dataclass(frozen=True)
class TuneRow:
    """One candidate config, measured on the tuning prompts.

    Attributes:
        config: W, N, G.
        compression: measured S (tokens / steps over all prompts).
        mean_forward_tokens: measured mean q per step.
        predicted_speedup: S * t(1) / t(q).
        measured_speedup: greedy's wall time / lookahead's, same prompts, interleaved.
        match: every output equalled greedy's (in float16 / bfloat16 a near-tie may flip a token:
            see `ladref.bench.agreement`).
    """

    config: LookaheadConfig
    compression: float
    mean_forward_tokens: float
    predicted_speedup: float
    measured_speedup: float
    match: bool


@dataclass(frozen=True)
class Recommendation:
    """The outcome of `recommend`.

    Attributes:
        config: the recommended config, or None when greedy decoding is the fastest measured.
        forward_cost: {q: seconds} at the prompts' context length (`ladref.pricing.cost.CostModel.times`).
        rows: every candidate's measurements.
        reason: one sentence saying why.
    """

    config: LookaheadConfig | None
    forward_cost: dict[int, float]
    rows: tuple[TuneRow, ...]
    reason: str


def measure_configs(model: torch.nn.Module, prompts: Sequence[torch.Tensor], configs: Sequence[LookaheadConfig],
                    cost: CostModel, max_new_tokens: int = 64, attention_backend: str = "auto",
                    progress: Progress | None = None) -> list[TuneRow]:
    """Measure S and wall time of each config, greedy interleaved on every prompt."""
    greedy_wall = {c: 0.0 for c in configs}
    totals = {c: [0, 0, 0, 0.0, True] for c in configs}  # tokens, steps, fed, wall, match
    for index, ids in enumerate(prompts):
        for config in configs:
            ref = greedy_decode(model, ids, max_new_tokens, attention_backend=attention_backend)
            out = lookahead_decode(model, ids, max_new_tokens, config=config, attention_backend=attention_backend)
            if progress is not None:
                progress(f"prompt {index + 1}/{len(prompts)}, W={config.window_size} N={config.ngram_size} "
                         f"G={config.max_candidates}: S={out.stats.compression:.2f}, "
                         f"{ref.stats.wall_time_s / out.stats.wall_time_s:.2f}x greedy")
            t = totals[config]
            t[0] += out.stats.new_tokens
            t[1] += out.stats.steps
            t[2] += sum(out.stats.forward_tokens_per_step)
            t[3] += out.stats.wall_time_s
            t[4] = t[4] and out.token_ids == ref.token_ids
            greedy_wall[config] += ref.stats.wall_time_s
    rows = []
    for config in configs:
        tokens, steps, fed, wall, match = totals[config]
        s, q = tokens / steps, fed / steps
        predicted = s / cost.relative(q)
        rows.append(TuneRow(config, s, q, predicted, greedy_wall[config] / wall, match))
    return rows


def choose_config(rows: Sequence[TuneRow], exact: bool = True) -> tuple[LookaheadConfig | None, str]:
    """The row measured fastest among those faster than greedy (and, if `exact`, with greedy's output).

    Args:
        rows: the measured candidates.
        exact: the model computes in float32 / float64, where any output other than greedy's is a
            bug; in float16 / bfloat16 a near-tie may flip a token, which says nothing of the config.

    Returns:
        (config, reason); config is None (use greedy) when no row was measured faster than greedy.
    """
    eligible = [r for r in rows if (r.match or not exact) and r.measured_speedup > 1.0]
    if not eligible:
        return None, "no candidate config was measured faster than greedy: use greedy decoding"
    best = max(eligible, key=lambda r: r.measured_speedup)
    c = best.config
    return c, (f"W={c.window_size}, N={c.ngram_size}, G={c.max_candidates}: predicted {best.predicted_speedup:.2f}x, "
               f"measured {best.measured_speedup:.2f}x over greedy (S={best.compression:.2f})")


def recommend(model: torch.nn.Module, prompts: Sequence[torch.Tensor], configs: Sequence[LookaheadConfig] | None = None,
              max_new_tokens: int = 64, block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES, context: int | None = None,
              attention_backend: str = "auto", progress: Progress | None = None) -> Recommendation:
    """Recommend the (W, N, G) measured fastest, if any was measured faster than greedy.

    Args:
        model: a transformers decoder-only model.
        prompts: tuning prompts, (L,) or (1, L) id tensors (a few suffice).
        configs: candidate `LookaheadConfig`s; default `default_configs` of the model's device.
        max_new_tokens: tokens per prompt and config.
        block_sizes: q values of the forward-cost curve (1 and the widest candidate's step are added).
        context: cached tokens while timing the forward pass; default mean prompt length + max_new_tokens // 2.
        attention_backend: SDPA kernel choice of every pass (`ladref.kernels.sdpa_backends`).
        progress: called with a one-line message after each measurement (e.g. ``print``).

    Returns:
        `Recommendation`; ``config`` is None when no candidate beat greedy on these prompts.
    """
    if not prompts:
        raise ValueError("recommend needs at least one prompt")
    param = next(model.parameters())
    configs = default_configs(param.device) if configs is None else configs
    if not configs or not all(isinstance(c, LookaheadConfig) for c in configs):
        raise TypeError("configs must be a non-empty sequence of LookaheadConfig")
    if context is None:
        context = int(sum(torch.as_tensor(p).numel() for p in prompts) / len(prompts)) + max_new_tokens // 2
    configs = list(dict.fromkeys(configs))
    widest = max(c.max_step_tokens() for c in configs)  # the cost model refuses widths it has not measured
    cost = CostModel.measure(model, sorted(set(block_sizes) | {1, widest}), (max(context, 1),), attention_backend=attention_backend)
    if progress is not None:
        progress("forward cost t(q), ms: " + ", ".join(f"{q}: {1e3 * t:.1f}" for q, t in cost.times().items()))
    rows = measure_configs(model, prompts, configs, cost, max_new_tokens, attention_backend, progress)
    config, reason = choose_config(rows, exact=param.dtype in (torch.float32, torch.float64))
    return Recommendation(config, cost.times(), tuple(rows), reason)
