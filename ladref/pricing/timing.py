"""Timing real decoding steps: what `ladref.pricing.cost.CostModel.measure` runs, and what a measurement depends on.

`measure_steps` times one forward pass of each width q at each KV length through a runner, as
decoding pays it, and `measure_batch_steps` the batched pass of B rows a batch's step runs; `describe` names what such a timing depends on (model, device, dtype, threads,
runner), and `processor` the processor it ran on.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..facts import ModelFacts
from ..head import batch_forward
from ..hf_internals import DynamicCache, new_cache, trim_cache
from ..kernels import attention_scope
from ..results import DecodeStats
from ..runner import Runner

Progress = Callable[[int, int], None]  # (passes done, passes in all)


def measure_steps(model: torch.nn.Module, runner: Runner, widths: Sequence[int], kv_lengths: Sequence[int], repeats: int,
                  progress: Progress | None = None) -> list[list[float]]:
    """``seconds[i][j]``: the fastest of `repeats` timed steps of width ``widths[j]`` at about ``kv_lengths[i]`` cached tokens.

    As decoding pays them: the runner's own forward pass with a (q, q) causal mask sent the way a
    draft's mask is, every logit kept, fresh positions. The cache is prefilled once with
    ``top = max(kv_lengths) + repeats`` tokens; one untimed pass per width at length ``top`` absorbs
    one-time costs (kernel loading, a compile); then the r-th timed pass of (q, kv) runs at length
    kv + r, each shape (q, length) once, so a kernel that plans per shape pays as a decoding step
    does. Between passes the cache is rolled back with ``runner.commit`` (longest first: a rollback
    only cuts), all widths interleaved at each length. CUDA is synchronized around each timing.
    The runner's cache must be empty before and is empty after.
    """
    if runner.past_len != 0:
        raise ValueError(f"measuring needs a runner with an empty cache, this one holds {runner.past_len} tokens")
    top = _top(runner.facts, widths, kv_lengths, repeats)
    runner.prefill(torch.arange(top + 1) % runner.facts.vocab_size, DecodeStats())  # caches `top` tokens
    seconds = _run_plan(widths, kv_lengths, repeats, lambda length, q: _timed_step(runner, length, q), progress)
    runner.empty()
    return seconds


def _top(facts: ModelFacts, widths: Sequence[int], kv_lengths: Sequence[int], repeats: int) -> int:
    """The cache length a measurement prefills, ``max(kv_lengths) + repeats``, checked against the model's positions."""
    top = max(kv_lengths) + repeats
    if facts.context is not None and top + max(widths) > facts.context:
        raise ValueError(f"a KV length of {max(kv_lengths)} plus {repeats} repeats and a {max(widths)}-token step "
                         f"exceeds the model's {facts.context} positions (max_position_embeddings)")
    return top


def _run_plan(widths: Sequence[int], kv_lengths: Sequence[int], repeats: int, timed: Callable[[int, int], float],
              progress: Progress | None) -> list[list[float]]:
    """The plan both measurements run: ``timed(length, q)`` once per width at the prefilled length (untimed),
    then the r-th timed pass of (q, kv) at length kv + r, widths interleaved, longest first; each cell's fastest.

    The fastest, not the median: a busy moment only adds time, so the minimum is the pass undisturbed,
    and the ratios t(q) / t(1) the policy prices with move less between measurements (SmolLM2-135M,
    2 CPU threads, B = 1, 4, 12, three measurements of 3 passes a cell: 0.21 against the median's
    0.24, mean spread of t(q) / t(1) for q = 2-12; `benchmarks/archive/cost_spread/`)."""
    top = max(kv_lengths) + repeats
    plan = [(top, None)] + sorted(((kv + r, i) for i, kv in enumerate(kv_lengths) for r in range(repeats)), reverse=True)
    samples = [[[] for _ in widths] for _ in kv_lengths]
    done, total = 0, len(plan) * len(widths)
    for length, row in plan:
        for j, q in enumerate(widths):
            seconds = timed(length, q)
            if row is not None:
                samples[row][j].append(seconds)
            done += 1
            if progress is not None:
                progress(done, total)
    return [[min(times) for times in row] for row in samples]


def _clocked(device: torch.device, step: Callable[[], object]) -> float:
    """Seconds `step` takes, CUDA synchronized around it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _timed_step(runner: Runner, length: int, q: int) -> float:
    """Roll the cache back to `length` tokens, then time one forward pass of q tokens."""
    # keep the first length-1 entries plus entry length-1 itself: a one-token commit, which every runner takes
    runner.commit(length - 1, torch.tensor([0]))
    ids = torch.arange(q) % runner.facts.vocab_size
    allowed = torch.ones(q, q, dtype=torch.bool).tril_()  # (q, q) causal
    return _clocked(runner.facts.device, lambda: runner.forward(ids, allowed=allowed))


def describe(model: torch.nn.Module, runner: Runner) -> str:
    """What a measurement depends on: model, parameters, device, dtype, CPU threads, runner and its kernels."""
    config, facts = model.config, runner.facts
    name = getattr(config, "name_or_path", "") or type(model).__name__
    name = Path(name).name if Path(name).is_dir() else name  # a local folder: its name, not this machine's path
    params = sum(p.numel() for p in model.parameters())
    threads = f", {torch.get_num_threads()} torch threads" if facts.device.type == "cpu" else ""
    kind, dtype = f"{type(runner).__name__}({', '.join(runner.details())})", str(facts.dtype).removeprefix("torch.")
    return f"{name} ({getattr(config, 'model_type', '?')}), {params:,} parameters, {facts.device} {dtype}{threads}, {kind}"


def processor(device: torch.device) -> str:
    """The processor a timing ran on: the GPU's name, or the CPU's model name (from /proc/cpuinfo where there is one)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # no /proc (macOS, Windows)
        pass
    return platform.processor() or platform.machine()


def measure_batch_steps(model: torch.nn.Module, facts: ModelFacts, batch: int, widths: Sequence[int], kv_lengths: Sequence[int],
                        repeats: int, kernels: tuple | None = None, progress: Progress | None = None) -> list[list[float]]:
    """As `measure_steps`, for a batch of `batch` rows that each feed q tokens over kv cached ones:
    ``seconds[i][j]``, the fastest time of one batched forward pass (B, q) at about ``kv_lengths[i]``.

    The pass is the one a batch's step runs (`ladref.head.batch_forward`: a shared cache of B rows,
    `new_cache`, and a (B, 1, q, kv + q) additive mask); between passes the cache is cut back
    (`ladref.hf_internals.trim_cache`). Same plan as `measure_steps`: one untimed pass per width first,
    then the r-th timed pass of (q, kv) at length kv + r, widths interleaved, longest first.
    """
    top = _top(facts, widths, kv_lengths, repeats)
    cache = new_cache(model.config)

    def timed(length: int, q: int) -> float:
        trim_cache(cache, length)
        return _batch_pass(model, facts, cache, batch, length, q)

    with attention_scope(kernels), torch.inference_mode():
        _batch_pass(model, facts, cache, batch, 0, top)  # caches `top` tokens in every row
        return _run_plan(widths, kv_lengths, repeats, timed, progress)


def _batch_pass(model: torch.nn.Module, facts: ModelFacts, cache: DynamicCache, batch: int, length: int, q: int) -> float:
    """Time one forward pass of `batch` rows of q tokens over `length` cached ones (causal within the step)."""
    ids = (torch.arange(length, length + q) % facts.vocab_size).expand(batch, q).to(facts.device)  # (B, q)
    positions = torch.arange(length, length + q, device=facts.device).expand(batch, q)  # (B, q)
    allowed = torch.ones(q, length + q, dtype=torch.bool, device=facts.device).tril_(length)  # (q, length + q)
    mask = torch.zeros(allowed.shape, dtype=facts.dtype, device=facts.device).masked_fill_(~allowed, torch.finfo(facts.dtype).min)
    mask = mask.expand(batch, 1, q, length + q)
    return _clocked(facts.device, lambda: batch_forward(model, facts, cache, ids, positions, mask))
