"""Run decoders interleaved on the same prompts and record honest per-prompt measurements.

Greedy decoding always runs, as the reference every output must equal and as the baseline of
the speedups. For each prompt all methods run back to back (their order rotated from prompt
to prompt), so that slow drifts of a shared machine hit every method alike.
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .config import LookaheadConfig
from .flops import ModelShape, decode_flops
from .greedy import greedy_decode
from .jacobi import jacobi_decode
from .lookahead import lookahead_decode
from .plookup import prompt_lookup_decode
from .results import DecodeResult

METHODS = ("greedy", "jacobi", "lookahead", "plookup")


@dataclass(frozen=True)
class BenchSettings:
    """What to run.

    Attributes:
        methods: decoders to compare; "greedy" is added first if missing.
        config: W, N, G of lookahead decoding.
        block_size: m of Jacobi decoding (tokens guessed per iteration).
        lookup_tokens: k of prompt lookup (``prompt_lookup_num_tokens``).
        max_new_tokens: tokens generated per prompt.
        warmup: run every method once on the first prompt (8 tokens, not recorded) first.
    """

    methods: tuple[str, ...] = ("greedy", "lookahead")
    config: LookaheadConfig = field(default_factory=LookaheadConfig)
    block_size: int = 4
    lookup_tokens: int = 10
    max_new_tokens: int = 96
    warmup: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.methods, str) or not self.methods:
            raise TypeError("methods must be a non-empty tuple of method names")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from {METHODS}")
        if not isinstance(self.config, LookaheadConfig):
            raise TypeError(f"config must be a LookaheadConfig, got {type(self.config).__name__}")
        ordered = ("greedy",) + tuple(dict.fromkeys(m for m in self.methods if m != "greedy"))
        object.__setattr__(self, "methods", ordered)


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
        flops: estimated FLOPs of the decoding steps (`ladref.flops.decode_flops`, prefill excluded).
        peak_mem_mib: CUDA: peak allocated memory of this call; CPU: the process's peak RSS so far.
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

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0


def decode(model: torch.nn.Module, ids: torch.Tensor, method: str, settings: BenchSettings,
           max_new_tokens: int | None = None) -> DecodeResult:
    """Run one decoder with the settings' knobs."""
    budget = settings.max_new_tokens if max_new_tokens is None else max_new_tokens
    if method == "greedy":
        return greedy_decode(model, ids, budget)
    if method == "jacobi":
        return jacobi_decode(model, ids, budget, block_size=settings.block_size)
    if method == "lookahead":
        return lookahead_decode(model, ids, settings.config, budget)
    if method == "plookup":
        return prompt_lookup_decode(model, ids, budget, num_tokens=settings.lookup_tokens)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


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
    on_prompt: Callable[[int], None] | None = None,
) -> list[PromptRecord]:
    """Run every method of `settings` on every prompt, interleaved, and check them against greedy.

    Args:
        model: a transformers decoder-only model (its device is used).
        prompts: one (L,) or (1, L) id tensor per prompt.
        settings: methods and knobs.
        prompt_ids: labels of the prompts; default "0", "1", ...
        on_prompt: called with the prompt's index after each prompt (e.g. a progress bar).

    Returns:
        One `PromptRecord` per (prompt, method), prompt-major, greedy first.
    """
    if not prompts:
        raise ValueError("run_bench needs at least one prompt")
    labels = list(prompt_ids) if prompt_ids is not None else [str(i) for i in range(len(prompts))]
    if len(labels) != len(prompts):
        raise ValueError(f"{len(labels)} prompt ids for {len(prompts)} prompts")
    device, shape = next(model.parameters()).device, ModelShape.from_model(model)
    if settings.warmup:
        for method in settings.methods:
            decode(model, prompts[0], method, settings, max_new_tokens=min(8, settings.max_new_tokens))
    records: list[PromptRecord] = []
    others = list(settings.methods[1:])
    for index, (label, ids) in enumerate(zip(labels, prompts)):
        shift = index % len(settings.methods)
        order = (["greedy"] + others)[shift:] + (["greedy"] + others)[:shift]
        results = {}
        for method in order:
            _reset_peak(device)
            results[method] = (decode(model, ids, method, settings), _peak_mib(device))
        reference = results["greedy"][0].token_ids
        for method in settings.methods:
            result, peak = results[method]
            stats = result.stats
            flops = decode_flops(shape, stats, method, settings.config).decode
            records.append(PromptRecord(
                label, method, stats.prefill_tokens + 1, stats.new_tokens, stats.steps, stats.compression,
                stats.mean_forward_tokens, stats.wall_time_s, result.token_ids == reference, flops, peak,
            ))
        if on_prompt is not None:
            on_prompt(index)
    return records
