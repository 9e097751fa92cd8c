"""Lookahead decoding against prompt length: S, speedup over greedy and time per step.

The prompts are picked spread over their token length (`spread_by_length`): from Spec-Bench,
whose question-answering prompts are about 40 tokens and whose summarization and RAG prompts run
to over a thousand. Each prompt runs greedy decoding, a one-token greedy call (the "prefill" probe:
one pass over the whole prompt) and every other method, interleaved and checked against greedy
(`ladref.bench.measure.run_bench`). Per prompt and method:

* S = new tokens / steps; speedup = (tokens / wall time) over greedy's, the whole call;
* decode speedup: the same with the prefill time taken out of both wall times;
* time per step = (wall time - prefill time) / steps, the cost of a step at that KV length
  (greedy's first token comes out of the prefill pass, so its figure is (n-1)/n of a step).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..decoders.greedy import greedy_decode
from .datasets import Prompt, encode_prompts
from .measure import BenchSettings, PromptRecord, run_bench
from .methods import BenchMethod

PROBE = "prefill"
"""Label of the one-token greedy call that times the prefill."""


@dataclass(frozen=True)
class ContextPoint:
    """One method on one prompt.

    Attributes:
        prompt_id: the dataset's id of the prompt.
        task: its task ("summarization", "rag", ...).
        prompt_tokens: L, the prompt's length in tokens (chat template included).
        method: the row's label ("greedy", "lookahead 15/5/15", ...).
        new_tokens: tokens generated.
        steps: decoding steps.
        compression: S = new_tokens / steps.
        wall_s: seconds of the whole call.
        prefill_s: seconds of the prefill probe on this prompt.
        ms_per_step: 1000 (wall_s - prefill_s) / steps.
        speedup: (new_tokens / wall_s) / greedy's, same prompt.
        decode_speedup: the same with prefill_s taken out of both wall times.
        match: output identical to greedy's.
    """

    prompt_id: str
    task: str
    prompt_tokens: int
    method: str
    new_tokens: int
    steps: int
    compression: float
    wall_s: float
    prefill_s: float
    ms_per_step: float
    speedup: float
    decode_speedup: float
    match: bool


def spread_by_length(lengths: Sequence[int], count: int) -> list[int]:
    """Indices of `count` items whose lengths are spread evenly in log(length), shortest first.

    For each of `count` targets log-spaced from the shortest to the longest length, the unused item
    whose length is nearest (in log) is taken; ties go to the earlier item.
    """
    if count < 1 or count > len(lengths):
        raise ValueError(f"count must be in 1..{len(lengths)}, got {count}")
    low, high = math.log(min(lengths)), math.log(max(lengths))
    chosen: list[int] = []
    for i in range(count):
        target = low + (high - low) * (i / (count - 1) if count > 1 else 0.5)
        free = [j for j in range(len(lengths)) if j not in chosen]
        chosen.append(min(free, key=lambda j: (abs(math.log(lengths[j]) - target), j)))
    return sorted(chosen, key=lambda j: (lengths[j], j))


def _rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def context_points(records: Sequence[PromptRecord]) -> list[ContextPoint]:
    """`ContextPoint`s from the records of a run holding a greedy and a `PROBE` row per prompt."""
    by = {(r.prompt_id, r.method): r for r in records}
    points = []
    for r in records:
        if r.method == PROBE:
            continue
        greedy, prefill = by[(r.prompt_id, "greedy")], by[(r.prompt_id, PROBE)].wall_s
        decode, greedy_decode_s = r.wall_s - prefill, greedy.wall_s - prefill
        points.append(ContextPoint(
            r.prompt_id, r.task, r.prompt_tokens, r.method, r.new_tokens, r.steps, r.compression, r.wall_s, prefill,
            1e3 * decode / r.steps if r.steps else 0.0,
            _rate(r.new_tokens, r.wall_s) / _rate(greedy.new_tokens, greedy.wall_s) if greedy.wall_s > 0 else 0.0,
            _rate(r.new_tokens, decode) / _rate(greedy.new_tokens, greedy_decode_s) if min(decode, greedy_decode_s) > 0 else 0.0,
            r.match,
        ))
    return points


def run_context_study(model: torch.nn.Module, tokenizer: object, prompts: Sequence[Prompt], settings: BenchSettings,
                      *, count: int, progress: bool = True) -> list[ContextPoint]:
    """Pick `count` prompts spread over length and run greedy, the probe and `settings`' methods on them.

    Returns:
        One `ContextPoint` per (prompt, method), shortest prompt first, greedy first.
    """
    from tqdm import tqdm

    ids = encode_prompts(tokenizer, list(prompts))
    picked = spread_by_length([t.shape[-1] for t in ids], count)
    chosen, chosen_ids = [prompts[i] for i in picked], [ids[i] for i in picked]
    rows = settings.methods_for(model, chosen_ids)
    backend = settings.attention_backend
    probe = lambda m, x, n: greedy_decode(m, x, 1, attention_backend=backend)  # noqa: E731
    rows.insert(1, BenchMethod(PROBE, "greedy", None, probe, lambda m, p, n: probe(m, p[0], n)))
    bar = tqdm(total=len(chosen), desc="context length", file=sys.stderr, disable=not progress)
    records = run_bench(model, chosen_ids, settings, prompt_ids=[p.prompt_id for p in chosen], tasks=[p.task for p in chosen],
                        on_prompt=lambda _: bar.update(), rows=rows)
    bar.close()
    return context_points(records)


def save_context(path: str | Path, points: Sequence[ContextPoint], meta: dict) -> Path:
    """Write the points and `meta` as JSON (parent folders created)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "points": [asdict(p) for p in points]}, indent=1) + "\n", encoding="utf-8")
    return out


def load_context(path: str | Path) -> tuple[dict, list[ContextPoint]]:
    """(meta, points) of a file written by `save_context`."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    return payload["meta"], [ContextPoint(**p) for p in payload["points"]]


def context_title(meta: dict, points: Sequence[ContextPoint]) -> str:
    """The figure's title from a run's meta: model, device (CPU / CUDA), machine, dtype, prompts, tokens."""
    prompts = len({p.prompt_id for p in points})
    tokens = max((p.new_tokens for p in points), default=0)
    return (f"Lookahead decoding vs prompt length: SmolLM2-135M-Instruct, {meta.get('device', '?').split(':')[0].upper()} "
            f"({meta.get('machine', '?')}), {meta.get('dtype', '?')}, "
            f"{prompts} prompts of {', '.join(meta.get('datasets', ['?']))}, up to {tokens} new tokens")


def plot_context(points: Sequence[ContextPoint], path: str | Path, title: str = "") -> Path:
    """Three panels against prompt length (log scale): S, speedup over greedy (filled: whole call,
    open: decoding only) and time per step. Matplotlib's object API on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13.0, 4.0))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    methods = list(dict.fromkeys(p.method for p in points))
    for color, method in zip(("black", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"), methods):
        mine = [p for p in points if p.method == method]
        x = [p.prompt_tokens for p in mine]
        if method != "greedy":
            axes[0].plot(x, [p.compression for p in mine], "o", color=color, label=method)
            axes[1].plot(x, [p.speedup for p in mine], "o", color=color, label=f"{method} (whole call)")
            axes[1].plot(x, [p.decode_speedup for p in mine], "o", mfc="none", color=color, label=f"{method} (decoding)")
        axes[2].plot(x, [p.ms_per_step for p in mine], "o", color=color, label=method)
    axes[1].axhline(1.0, color="black", linewidth=0.8)
    for ax, label in zip(axes, ("S (tokens per step)", "speedup over greedy_decode", "ms per decoding step")):
        ax.set_xscale("log")
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
