"""Compiled steps a later process loads instead of compiling: AOTInductor packages on disk.

Inductor's on-disk caches do not keep a frozen max-autotune step on a CPU: its weights are packed
into oneDNN tensors, which Inductor does not cache (docs/compiled.md), so with `torch.compile`
every process compiles every width again, about a minute each for SmolLM2-135M. With a
``compile_dir``, a `ladref.fast.static.StaticRunner` instead exports each width's step
(`torch.export`) and compiles it ahead of time into an AOTInductor package, a file, once; a
runner in any later process with the same model, cache length, width and settings loads it in
seconds. The package holds the (frozen) weights, not the KV cache: its cache buffers are bound,
without a copy, to the runner's own (``user_managed``), so the loaded step writes the runner's
cache exactly as the compiled one does.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from ..kernels import attention_scope
from ..runner import static_cache_buffers

# Inductor settings of each compile mode a package can be built with
PACKAGE_CONFIGS = {"max-autotune": {"freezing": True, "max_autotune": True}, "default": {}}


def check_compile_dir(compile_dir: object, mode: str | None) -> Path | None:
    """`compile_dir` as a Path (None: no packages), or a clear error."""
    if compile_dir is None:
        return None
    if not isinstance(compile_dir, (str, os.PathLike)):
        raise TypeError(f"compile_dir must be a path (str or os.PathLike) or None, got {type(compile_dir).__name__}")
    if mode not in PACKAGE_CONFIGS:
        raise ValueError(f"compile_dir keeps AOTInductor packages of compiled steps: compile_mode must be one of "
                         f"{tuple(PACKAGE_CONFIGS)}, got {mode!r}")
    return Path(compile_dir).expanduser()


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of every parameter's and buffer's name, dtype, shape and bytes (frozen into a package)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def package_name(runner, width: int, weights: str) -> str:
    """The file name of `runner`'s step of `width`: a digest of everything its compiled code depends on."""
    model, device = runner.model, runner.device
    parts = (torch.__version__, transformers.__version__, type(model).__name__, model.config.to_json_string(), weights,
             str(runner.dtype), str(device), runner.max_length, width, runner.compile_mode, torch.get_num_threads(),
             torch.backends.cpu.get_cpu_capability() if device.type == "cpu" else torch.cuda.get_device_name(device),
             runner.kernels)
    return f"step-w{width}-{hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()}.pt2"


class ExportedStep(torch.nn.Module):
    """A runner's step function as a module whose buffers are the cache's: export sees the step write them."""

    def __init__(self, step: Callable, runner) -> None:
        super().__init__()
        self.step, self.model, self.runner = step, runner.model, runner
        for name, buffer in static_cache_buffers(runner.cache).items():
            self.register_buffer(name, buffer, persistent=False)

    def forward(self, input_ids, position_ids, allowed, length):  # (w,), (w,), (w, w), () -> (w, V)
        return self.step(self.runner, input_ids, position_ids, allowed, length)


def build_package(runner, width: int, path: Path, step: Callable) -> None:
    """Export `step` at `width` over a scratch runner of the same model and cache length (the
    runner's own cache is never traced), compile it ahead of time, save the package at `path`."""
    scratch, d = type(runner)(runner.model, runner.max_length), runner.device
    example = (torch.zeros(width, dtype=torch.long, device=d), torch.arange(width, device=d),
               torch.ones(width, width, dtype=torch.bool, device=d).tril_(), torch.tensor(0, device=d))
    with torch.no_grad(), attention_scope(runner.kernels):
        step(scratch, example[0][:1], example[1][:1], example[2][:1, :1], example[3])  # allocates its cache buffers
        program = torch.export.export(ExportedStep(step, scratch), example, strict=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, part = tempfile.mkstemp(suffix=".pt2", dir=path.parent)  # written whole, then renamed: never half a file
        os.close(handle)
        try:
            torch._inductor.aoti_compile_and_package(program, package_path=part,
                                                     inductor_configs=PACKAGE_CONFIGS[runner.compile_mode])
            os.chmod(part, 0o644)  # mkstemp's file is private; a package is as readable as a cache file
            os.replace(part, path)
        finally:
            if os.path.exists(part):
                os.remove(part)


def packaged_step(runner, width: int, directory: Path, weights: str, step: Callable) -> tuple[Callable, bool]:
    """The step of `width` from its package in `directory` (built from `step` first if missing,
    `build_package`), bound to the runner's cache; `weights`: the model's `weights_digest`.

    Returns:
        (a step called as `static_step` is, whether the package was already on disk).
    """
    path = directory / package_name(runner, width, weights)
    found = path.exists()
    if not found:
        build_package(runner, width, path, step)
    loaded = torch._inductor.aoti_load_package(str(path))
    loaded.loader.load_constants(static_cache_buffers(runner.cache), False, False, True)  # user-managed: no copy

    def run(_runner, input_ids, position_ids, allowed, length):
        return loaded(input_ids, position_ids, allowed, length)

    return run, found
