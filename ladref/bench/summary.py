"""Per-method totals of a run's records (`summarize`): speeds, the speedups with their intervals, flags, memory."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from .leaderboard import against
from .measure import PromptRecord


@dataclass(frozen=True)
class MethodSummary:
    """One method over all prompts of a run.

    Attributes:
        method: the decoder.
        prompts: prompts run.
        tokens: tokens generated in total.
        steps: decoding steps in total.
        compression: S = tokens / steps.
        tokens_per_second: tokens / total wall time.
        speedup: ladref greedy's total wall time / this method's, same prompts, same run.
        speedup_vs_generate: transformers' greedy generate()'s total wall time / this method's
            (None without a "generate" run).
        speedup_vs_plookup: transformers' prompt lookup's (row "hf_plookup") total wall time / this
            method's (None without that row).
        flops_ratio: estimated decoding FLOPs / greedy's.
        match_rate: fraction of prompts whose output equals greedy's.
        identical: prompts whose output equals greedy's.
        peak_mem_mib: the largest `PromptRecord.peak_mem_mib` (what the process held at the call's peak).
        added_mem_mib: the largest `PromptRecord.added_mem_mib` (what a call itself added; None: a file from
            before it was measured).
        gflops_per_step: estimated decoding GFLOPs per step (`ladref.bench.flops`).
        ms_per_step: total wall time / steps (the prefill is included in the wall time).
        vs_generate: over `generate()`, per prompt: the geometric mean, its 95% bootstrap interval over
            prompts and the pooled figure (`ladref.bench.protocol.Speedup` as a dict; None without that row).
        vs_greedy: the same over ladref's `greedy_decode`.
        vs_generate_compiled: the same over transformers' own compiled greedy (row "generate_compiled").
        flagged: prompts whose figure the measurement protocol flagged (a disturbed machine).
        rounds: timed calls in all (every round of every prompt).
        accepted: the histogram {tokens accepted by a step: steps} over every prompt.
    """

    method: str
    prompts: int
    tokens: int
    steps: int
    compression: float
    tokens_per_second: float
    speedup: float
    speedup_vs_generate: float | None
    speedup_vs_plookup: float | None
    flops_ratio: float
    match_rate: float
    peak_mem_mib: float
    gflops_per_step: float
    ms_per_step: float
    identical: int
    vs_generate: dict | None = None
    vs_greedy: dict | None = None
    vs_generate_compiled: dict | None = None
    flagged: int = 0
    rounds: int = 0
    accepted: dict[str, int] = field(default_factory=dict)
    added_mem_mib: float | None = None


def _versus(rows: Sequence[PromptRecord], base: Sequence[PromptRecord]) -> dict | None:
    """`leaderboard.against` as a dict (None without a baseline)."""
    found = against(rows, base)
    return None if found is None else asdict(found)


def summarize(records: Sequence[PromptRecord]) -> list[MethodSummary]:
    """Per-method totals, in the order the methods first appear (greedy first)."""
    methods = list(dict.fromkeys(r.method for r in records))
    if "greedy" not in methods:
        raise ValueError("the records hold no greedy run, the reference of every ratio")
    wall = {m: sum(r.wall_s for r in records if r.method == m) for m in methods}
    flops = {m: sum(r.flops for r in records if r.method == m) for m in methods}
    summaries = []
    for m in methods:
        rows = [r for r in records if r.method == m]
        tokens, steps = sum(r.new_tokens for r in rows), sum(r.steps for r in rows)
        summaries.append(MethodSummary(
            method=m,
            prompts=len(rows),
            tokens=tokens,
            steps=steps,
            compression=tokens / steps if steps else 0.0,
            tokens_per_second=tokens / wall[m] if wall[m] > 0 else 0.0,
            speedup=wall["greedy"] / wall[m] if wall[m] > 0 else 0.0,
            speedup_vs_generate=wall["generate"] / wall[m] if "generate" in wall and wall[m] > 0 else None,
            speedup_vs_plookup=wall["hf_plookup"] / wall[m] if "hf_plookup" in wall and wall[m] > 0 else None,
            flops_ratio=flops[m] / flops["greedy"] if flops["greedy"] else 0.0,
            match_rate=sum(r.match for r in rows) / len(rows),
            peak_mem_mib=max(r.peak_mem_mib for r in rows),
            gflops_per_step=flops[m] / steps / 1e9 if steps else 0.0,
            ms_per_step=1e3 * wall[m] / steps if steps else 0.0,
            identical=sum(r.match for r in rows),
            vs_generate=_versus(rows, [r for r in records if r.method == "generate"]),
            vs_greedy=_versus(rows, [r for r in records if r.method == "greedy"]),
            vs_generate_compiled=_versus(rows, [r for r in records if r.method == "generate_compiled"]),
            flagged=sum(r.flagged for r in rows),
            rounds=sum(len(r.rounds_s) for r in rows),
            accepted={str(k): v for k, v in sorted(sum((Counter({int(a): c for a, c in r.accepted.items()}) for r in rows),
                                                        Counter()).items())},
            added_mem_mib=max(r.added_mem_mib for r in rows),
        ))
    return summaries
