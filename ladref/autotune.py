"""Pick (W, N, G) for this machine: forward cost per block size x measured compression S.

A lookahead step feeds q = (N-1)(W+g) tokens and yields S tokens on average, so its speedup over
greedy is predicted as ``S * t(1) / t(q)`` with t(q) the measured time of a q-token forward pass
(flat while the hardware is underused, then growing about linearly). `recommend` measures t(q)
for a few block sizes and S for a few configs (with greedy interleaved on the same prompts),
and returns the config with the best predicted speedup among those that were *measured* faster
than greedy; when none was, it recommends greedy decoding (``config=None``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .backend import ModelRunner
from .common import sync
from .config import LookaheadConfig
from .greedy import greedy_decode
from .lookahead import lookahead_decode

DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
DEFAULT_CONFIGS = tuple(LookaheadConfig(w, n, g) for w, n, g in ((2, 3, 2), (4, 3, 4), (4, 4, 4), (6, 4, 6), (8, 5, 8)))


@torch.inference_mode()
def measure_forward_cost(model: torch.nn.Module, block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
                         context: int = 256, repeats: int = 5) -> dict[int, float]:
    """t(q): fastest of `repeats` forward passes over q new tokens after `context` cached ones, in seconds.

    The minimum, not the mean: on a shared machine other work only ever adds time. The cache is
    rolled back after every pass, so every measurement sees the same context.

    Returns:
        {q: seconds} for each block size.
    """
    if not block_sizes or any(isinstance(q, bool) or not isinstance(q, int) or q < 1 for q in block_sizes):
        raise ValueError(f"block_sizes must be ints >= 1, got {block_sizes!r}")
    if repeats < 1 or context < 0:
        raise ValueError("repeats must be >= 1 and context >= 0")
    runner = ModelRunner(model)
    vocab = model.get_input_embeddings().num_embeddings
    if context:
        runner.forward(torch.arange(context) % vocab, keep=torch.tensor([0]))
    costs = {}
    for q in sorted(set(block_sizes)):
        ids = torch.arange(q) % vocab
        for _ in range(2):  # warm-up
            runner.forward(ids)
            runner.commit(context, torch.arange(0))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            runner.forward(ids)
            sync(runner.device)
            times.append(time.perf_counter() - start)
            runner.commit(context, torch.arange(0))
        costs[q] = min(times)
    return costs


def interpolate_cost(costs: dict[int, float], q: float) -> float:
    """t(q) by linear interpolation between measured block sizes (linear extrapolation outside)."""
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
        match: every output equalled greedy's.
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
        forward_cost: {q: seconds} measured by `measure_forward_cost`.
        rows: every candidate's measurements.
        reason: one sentence saying why.
    """

    config: LookaheadConfig | None
    forward_cost: dict[int, float]
    rows: tuple[TuneRow, ...]
    reason: str


def measure_configs(model: torch.nn.Module, prompts: Sequence[torch.Tensor], configs: Sequence[LookaheadConfig],
                    costs: dict[int, float], max_new_tokens: int = 64) -> list[TuneRow]:
    """Measure S and wall time of each config, greedy interleaved on every prompt."""
    greedy_wall = {c: 0.0 for c in configs}
    totals = {c: [0, 0, 0, 0.0, True] for c in configs}  # tokens, steps, fed, wall, match
    for ids in prompts:
        for config in configs:
            ref = greedy_decode(model, ids, max_new_tokens)
            out = lookahead_decode(model, ids, config, max_new_tokens)
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
        predicted = s * interpolate_cost(costs, 1) / interpolate_cost(costs, q)
        rows.append(TuneRow(config, s, q, predicted, greedy_wall[config] / wall, match))
    return rows


def choose_config(rows: Sequence[TuneRow]) -> tuple[LookaheadConfig | None, str]:
    """The best predicted row among those measured faster than greedy with greedy's output.

    Returns:
        (config, reason); config is None (use greedy) when no row was measured faster than greedy.
    """
    eligible = [r for r in rows if r.match and r.measured_speedup > 1.0]
    if not eligible:
        return None, "no candidate config was measured faster than greedy: use greedy decoding"
    best = max(eligible, key=lambda r: r.predicted_speedup)
    c = best.config
    return c, (f"W={c.window_size}, N={c.ngram_size}, G={c.max_candidates}: predicted {best.predicted_speedup:.2f}x, "
               f"measured {best.measured_speedup:.2f}x over greedy (S={best.compression:.2f})")


def recommend(model: torch.nn.Module, prompts: Sequence[torch.Tensor], configs: Sequence[LookaheadConfig] = DEFAULT_CONFIGS,
              max_new_tokens: int = 64, block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES, context: int | None = None) -> Recommendation:
    """Recommend the (W, N, G) with the best predicted speedup that was measured faster than greedy.

    Args:
        model: a transformers decoder-only model.
        prompts: tuning prompts, (L,) or (1, L) id tensors (a few suffice).
        configs: candidate `LookaheadConfig`s.
        max_new_tokens: tokens per prompt and config.
        block_sizes: q values of the forward-cost curve.
        context: cached tokens while timing the forward pass; default mean prompt length + max_new_tokens // 2.

    Returns:
        `Recommendation`; ``config`` is None when no candidate beat greedy on these prompts.
    """
    if not prompts:
        raise ValueError("recommend needs at least one prompt")
    if not configs or not all(isinstance(c, LookaheadConfig) for c in configs):
        raise TypeError("configs must be a non-empty sequence of LookaheadConfig")
    if context is None:
        context = int(sum(torch.as_tensor(p).numel() for p in prompts) / len(prompts)) + max_new_tokens // 2
    costs = measure_forward_cost(model, block_sizes, context)
    rows = measure_configs(model, prompts, list(dict.fromkeys(configs)), costs, max_new_tokens)
    config, reason = choose_config(rows)
    return Recommendation(config, costs, tuple(rows), reason)
