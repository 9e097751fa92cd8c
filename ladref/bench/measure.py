"""Run decoders interleaved on the same prompts and record honest per-prompt measurements.

Greedy decoding always runs, as the reference every output must equal. For each prompt all
methods run back to back in rounds (their order rotated each round and from prompt to prompt),
so that slow drifts of a shared machine hit every method alike; the measurement protocol
(`ladref.bench.protocol`) measures again what a busy moment disturbed, and flags what stays off.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..kernels import check_attention_backend
from ..results import DecodeResult
from .flops import ModelShape, decode_flops
from .memory import peak_mib, reset_peak
from .methods import METHODS, BenchMethod, bench_methods, canonical_method, config_label  # noqa: F401 (re-exported)
from .protocol import Protocol, Sample, disturbed, figure, rounds, settled, timed


@dataclass(frozen=True)
class BenchSettings:
    """What to run.

    Attributes:
        methods: decoders to compare (`METHODS`, or an alias such as "plookup"); "greedy" is
            added first if missing.
        configs: W, N, G of lookahead decoding: one config, or several (one row each).
        block_size: m of Jacobi decoding (tokens guessed per iteration).
        lookup_tokens: k of prompt lookup (``prompt_lookup_num_tokens``).
        max_new_tokens: tokens generated per prompt.
        warmup: run each method's one-time set-up first (a short first call; compilation and
            capture for the compiled rows), timed apart from decoding.
        attention_backend: SDPA kernel choice of ladref's decoders (`ladref.kernels.sdpa_backends`).
        compile_mode: `CompiledDecoder` mode of the compiled rows ("auto": CUDA graphs on CUDA,
            frozen max-autotune Inductor on a CPU).
        compile_dir: a folder of AOTInductor packages for the compiled rows (`ladref.fast.precompiled`):
            built there by the first run, loaded by later ones; None: `torch.compile` every run.
        protocol: the rounds and the rules for a disturbed sample (`ladref.bench.protocol`; its
            thread count is the run's own).
    """

    methods: tuple[str, ...] = ("greedy", "lookahead")
    configs: tuple[LookaheadConfig, ...] | LookaheadConfig = (LookaheadConfig(),)
    block_size: int = 4
    lookup_tokens: int = 10
    max_new_tokens: int = 96
    warmup: bool = True
    attention_backend: str = "auto"
    compile_mode: str | None = "auto"
    compile_dir: str | None = None
    protocol: Protocol = Protocol()

    def __post_init__(self) -> None:
        if isinstance(self.methods, str) or not self.methods:
            raise TypeError("methods must be a non-empty tuple of method names")
        methods = tuple(canonical_method(m) for m in self.methods)
        configs = (self.configs,) if isinstance(self.configs, LookaheadConfig) else tuple(self.configs)
        if not configs or not all(isinstance(c, LookaheadConfig) for c in configs):
            raise TypeError("configs must be a LookaheadConfig or a non-empty tuple of them")
        check_attention_backend(self.attention_backend)
        ordered = ("greedy",) + tuple(dict.fromkeys(m for m in methods if m != "greedy"))
        object.__setattr__(self, "methods", ordered)
        object.__setattr__(self, "configs", tuple(dict.fromkeys(configs)))

    def methods_for(self, model: torch.nn.Module, prompts: Sequence[torch.Tensor]) -> list[BenchMethod]:
        """The benchmark's rows for `model` (compiled decoders sized for the longest prompt), greedy first."""
        widest = max([c.max_step_tokens() for c in self.configs] + [c.ngram_size for c in self.configs] + [1])
        max_length = max(torch.as_tensor(p).numel() for p in prompts) + self.max_new_tokens + widest + 1
        return bench_methods(self.methods, self.configs, model, max_length, block_size=self.block_size,
                             lookup_tokens=self.lookup_tokens, attention_backend=self.attention_backend,
                             compile_mode=self.compile_mode, compile_dir=self.compile_dir)


@dataclass(frozen=True)
class PromptRecord:
    """One method on one prompt: its figure, and every round that measured it.

    Attributes:
        prompt_id: the dataset's id of the prompt.
        method: the decoder.
        prompt_tokens: L.
        new_tokens: tokens generated.
        steps: decoding steps (forward passes after the prefill).
        compression: S = new_tokens / steps, Spec-Bench's "mean accepted tokens".
        mean_forward_tokens: mean tokens fed per step.
        wall_s: seconds of the whole call (prefill included): the median undisturbed round
            (`ladref.bench.protocol.figure`).
        match: output identical to greedy's on this prompt, in every round.
        flops: estimated FLOPs of the decoding steps (`ladref.bench.flops.decode_flops`, prefill excluded).
        peak_mem_mib: the peak memory of this method's calls alone: CUDA, allocated; a CPU, the
            process's resident set (its high-water mark reset before each call, Linux). It holds what
            the process held before the call (the model, other rows' compiled steps).
        added_mem_mib: what the call itself added: its peak less the memory held when it started
            (the largest over the rounds; 0 where the platform cannot tell).
        task: the prompt's task (Spec-Bench's "translation", ...; else the dataset or "").
        rounds_s: every round's wall time, in the order measured.
        cpu_shares: every round's CPU share (process CPU time / (wall x threads)).
        loads: the 1-minute load average when each round started.
        disturbed: which rounds the protocol judged disturbed (`ladref.bench.protocol.disturbed`).
        flagged: the rounds never settled: a figure measured on a disturbed machine.
        accepted: the histogram {tokens accepted by a step: steps} (keys as strings, as JSON keeps them).
    """

    prompt_id: str
    method: str
    prompt_tokens: int
    new_tokens: int
    steps: int
    compression: float
    mean_forward_tokens: float
    wall_s: float
    match: bool
    flops: int
    peak_mem_mib: float
    task: str = ""
    rounds_s: tuple[float, ...] = ()
    cpu_shares: tuple[float, ...] = ()
    loads: tuple[float, ...] = ()
    disturbed: tuple[bool, ...] = ()
    flagged: bool = False
    accepted: dict[str, int] = field(default_factory=dict)
    added_mem_mib: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0


def _timed_prompt(model, rows: Sequence[BenchMethod], ids: torch.Tensor, settings: BenchSettings, protocol: Protocol,
                  shift: int) -> dict[str, tuple[DecodeResult, list[Sample], bool, float]]:
    """Every row on one prompt in protocol rounds: its first result, its samples, whether every round's
    output equalled greedy's first, and its (peak, added) memory, MiB."""
    device, by_label = next(model.parameters()).device, {row.label: row for row in rows}
    restore = {row.label: row.checkpoint() for row in rows if row.checkpoint is not None}
    out: dict[str, list] = {}

    def measure(label: str) -> Sample:
        if label in out and label in restore:  # a row that learns across prompts starts each round as it started the first
            restore[label]()
        held = reset_peak(device)
        result, sample = timed(lambda: by_label[label].run(model, ids, settings.max_new_tokens))
        peak = peak_mib(device)
        first = out.setdefault(label, [result, True, peak, 0.0])
        first[1] = first[1] and result.token_ids == first[0].token_ids
        first[2], first[3] = max(first[2], peak), max(first[3], peak - held if held else 0.0)
        return replace(sample, steps=max(1, result.stats.steps))

    samples = rounds([row.label for row in rows], measure, protocol, shift=shift)
    reference = out["greedy"][0].token_ids
    return {label: (result, samples[label], same and result.token_ids == reference, (peak, added))
            for label, (result, same, peak, added) in out.items()}


def _record(label: str, task: str, row: BenchMethod, measured: tuple, shape: ModelShape, protocol: Protocol) -> PromptRecord:
    result, samples, match, (peak, added) = measured
    stats, chosen = result.stats, figure(samples, protocol)
    flops = decode_flops(shape, stats, row.flops_kind, row.config).decode
    return PromptRecord(
        label, row.label, stats.prefill_tokens + 1, stats.new_tokens, stats.steps, stats.compression,
        stats.mean_forward_tokens, chosen.wall_s, match, flops, peak, task,
        tuple(s.wall_s for s in samples), tuple(round(s.share(protocol.threads), 3) for s in samples),
        tuple(round(s.load, 2) for s in samples), tuple(disturbed(samples, protocol)), not settled(samples, protocol),
        {str(k): v for k, v in sorted(Counter(stats.accepted_per_step).items())}, round(added, 1),
    )


def device_protocol(protocol: Protocol, device: torch.device) -> Protocol:
    """`protocol` with this run's torch threads (off a CPU, no CPU share is asked for: the host waits on the device)."""
    if device.type != "cpu":
        return replace(protocol, min_share=0.0)
    return replace(protocol, threads=torch.get_num_threads())


def bench_protocol(settings: BenchSettings, device: torch.device) -> Protocol:
    """`settings.protocol` for `device` (`device_protocol`)."""
    return device_protocol(settings.protocol, device)


def run_bench(
    model: torch.nn.Module,
    prompts: Sequence[torch.Tensor],
    settings: BenchSettings,
    *,
    prompt_ids: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    on_prompt: Callable[[int], None] | None = None,
    setup_s: dict[str, float] | None = None,
    rows: Sequence[BenchMethod] | None = None,
) -> list[PromptRecord]:
    """Run every method of `settings` on every prompt, interleaved in protocol rounds, and check them against greedy.

    Args:
        model: a transformers decoder-only model (its device is used).
        prompts: one (L,) or (1, L) id tensor per prompt.
        settings: methods, knobs and the measurement protocol (`ladref.bench.protocol`).
        prompt_ids: labels of the prompts; default "0", "1", ...
        tasks: the task of each prompt (`PromptRecord.task`); default "".
        on_prompt: called with the prompt's index after each prompt (e.g. a progress bar).
        setup_s: if given, filled with each method's one-time set-up seconds (compile / capture).
        rows: the rows to run instead of ``settings.methods_for(...)``; the first must be "greedy".

    Returns:
        One `PromptRecord` per (prompt, method), prompt-major, greedy first.
    """
    if not prompts:
        raise ValueError("run_bench needs at least one prompt")
    labels = list(prompt_ids) if prompt_ids is not None else [str(i) for i in range(len(prompts))]
    task_of = list(tasks) if tasks is not None else [""] * len(prompts)
    if len(labels) != len(prompts) or len(task_of) != len(prompts):
        raise ValueError(f"{len(labels)} prompt ids and {len(task_of)} tasks for {len(prompts)} prompts")
    device, shape = next(model.parameters()).device, ModelShape.from_model(model)
    rows = list(rows) if rows is not None else settings.methods_for(model, [torch.as_tensor(p) for p in prompts])
    if not rows or rows[0].label != "greedy":
        raise ValueError("the first row must be greedy, the reference of every output")
    protocol = bench_protocol(settings, device)
    stuck = [row.label for row in rows if row.stateful and row.checkpoint is None]
    if stuck and protocol.max_rounds > 1:
        raise ValueError(f"{', '.join(stuck)} learn across calls and cannot restart a round as it started: "
                         "run them with one round (Protocol(min_rounds=1, max_rounds=1))")
    if settings.warmup:
        for row in rows:
            start = time.perf_counter()
            restore = row.checkpoint() if row.checkpoint is not None else None
            row.warm(model, prompts, settings.max_new_tokens)
            if restore is not None:  # a learning row's set-up call must not teach it a benchmarked prompt
                restore()
            if setup_s is not None:
                setup_s[row.label] = time.perf_counter() - start
    records: list[PromptRecord] = []
    for index, (label, task, ids) in enumerate(zip(labels, task_of, prompts)):
        measured = _timed_prompt(model, rows, ids, settings, protocol, index)
        records += [_record(label, task, row, measured[row.label], shape, protocol) for row in rows]
        if on_prompt is not None:
            on_prompt(index)
    return records
