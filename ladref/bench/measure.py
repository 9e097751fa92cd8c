"""Run decoders interleaved on the same prompts and record honest per-prompt measurements.

Greedy decoding always runs, as the reference every output must equal and as the baseline of
the speedups. For each prompt all methods run back to back (their order rotated from prompt
to prompt), so that slow drifts of a shared machine hit every method alike.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..config import LookaheadConfig
from ..kernels import check_attention_backend
from .flops import ModelShape, decode_flops
from .methods import METHODS, BenchMethod, bench_methods, canonical_method, config_label  # noqa: F401 (re-exported)


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
    """One method on one prompt.

    Attributes:
        prompt_id: the dataset's id of the prompt.
        method: the decoder.
        prompt_tokens: L.
        new_tokens: tokens generated.
        steps: decoding steps (forward passes after the prefill).
        compression: S = new_tokens / steps.
        mean_forward_tokens: mean tokens fed per step.
        wall_s: seconds of the whole call (prefill included).
        match: output identical to greedy's on this prompt.
        flops: estimated FLOPs of the decoding steps (`ladref.bench.flops.decode_flops`, prefill excluded).
        peak_mem_mib: CUDA: peak allocated memory of this call; CPU: the process's peak RSS so far.
        task: the prompt's task (Spec-Bench's "translation", ...; else the dataset or "").
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

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device: torch.device) -> float:
    """CUDA: max allocated since the last reset; CPU: the process's max RSS (Linux reports KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    """Run every method of `settings` on every prompt, interleaved, and check them against greedy.

    Args:
        model: a transformers decoder-only model (its device is used).
        prompts: one (L,) or (1, L) id tensor per prompt.
        settings: methods and knobs.
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
    if settings.warmup:
        for row in rows:
            start = time.perf_counter()
            row.warm(model, prompts, settings.max_new_tokens)
            if setup_s is not None:
                setup_s[row.label] = time.perf_counter() - start
    records: list[PromptRecord] = []
    for index, (label, task, ids) in enumerate(zip(labels, task_of, prompts)):
        shift = index % len(rows)
        results = {}
        for row in rows[shift:] + rows[:shift]:
            _reset_peak(device)
            results[row.label] = (row.run(model, ids, settings.max_new_tokens), _peak_mib(device))
        reference = results["greedy"][0].token_ids
        for row in rows:
            result, peak = results[row.label]
            stats = result.stats
            flops = decode_flops(shape, stats, row.flops_kind, row.config).decode
            records.append(PromptRecord(
                label, row.label, stats.prefill_tokens + 1, stats.new_tokens, stats.steps, stats.compression,
                stats.mean_forward_tokens, stats.wall_time_s, result.token_ids == reference, flops, peak, task,
            ))
        if on_prompt is not None:
            on_prompt(index)
    return records
