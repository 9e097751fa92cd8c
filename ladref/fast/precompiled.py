"""Compiled steps a later process loads instead of compiling: AOTInductor packages on disk.

Inductor's on-disk caches do not keep a frozen max-autotune step on a CPU (its packed oneDNN
weights are not cached, docs/compiled.md): with `torch.compile` every process compiles every width
again. With a ``compile_dir``, a `ladref.fast.static.StaticRunner` instead exports its step
(`torch.export`) and compiles it ahead of time into an AOTInductor package, a file, once; a later
runner of the same model, cache length, widths and settings loads it in seconds. One package
serves all of a runner's widths, the width a dynamic dimension (1 to the widest): it holds one
copy of the frozen, packed weights, where one package per width held one each. Its span, the
cache slots a step attends over, is a dynamic dimension too where the model's steps cut it
(`ladref.fast.static.StaticRunner.span`): a step attends over the slots it uses, not all M. The
package holds the weights, not the KV cache: its cache buffers are bound, without a copy, to the
runner's own (``user_managed``), so the loaded step writes the runner's cache exactly as the
compiled one does.

A file on disk is not trusted by its name alone. Every package carries a record of what it was
built for (`package_record`: model class, config and weights digests, dtype, device, cache
length, widths, mode, threads, processor, the slots a step attends over, torch and transformers
versions), stored inside it as AOTInductor metadata and read back (`ladref.fast.package_record`)
before the package is loaded. A package that cannot be read (truncated, another format) or whose
record differs (a file copied over another's name) is reported with a warning and built again. A package is written to a
temporary file and renamed, so no reader sees half a file, and built under a lock file beside
it (``.lock``), so a second process waits and loads it instead of compiling it twice. A folder
that cannot be written (read-only, full) gives a warning, and the step is compiled in the
process, as without a ``compile_dir``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ..hf_internals import static_cache_buffers
from .package_record import package_name, package_problem, package_record

try:
    import fcntl
except ImportError:  # no advisory locks (Windows): builds stay atomic (a temporary file renamed), maybe done twice
    fcntl = None

# Inductor settings of each compile mode a package can be built with ("max-autotune": every GEMM
# in Inductor's own C++ kernels, whose packed weights are plain tensors, the same for every width)
PACKAGE_CONFIGS = {"max-autotune": {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"}, "default": {}}
# the weights in a file of their own, read once when loaded (in the library: resident twice)
WEIGHTS_APART = {"aot_inductor.package_constants_in_so": False, "aot_inductor.package_constants_on_disk_format": "binary_blob"}
COST_FILE = "cost.json"
"""The `ladref.pricing.cost_cache.CostCache` file a `compile_dir` keeps beside its packages (the compiled steps' cost curves)."""


def check_compile_dir(compile_dir: object, mode: str | None) -> Path | None:
    """`compile_dir` as a Path (None: no packages), or a clear error.

    Raises:
        TypeError: not a path.
        ValueError: a compile mode packages cannot be built with, or a path that names a file:
            a mistake in the call, refused before anything is compiled.
    """
    if compile_dir is None:
        return None
    if not isinstance(compile_dir, (str, os.PathLike)):
        raise TypeError(f"compile_dir must be a path (str or os.PathLike) or None, got {type(compile_dir).__name__}")
    if mode not in PACKAGE_CONFIGS:
        raise ValueError(f"compile_dir keeps AOTInductor packages of compiled steps: compile_mode must be one of "
                         f"{tuple(PACKAGE_CONFIGS)}, got {mode!r}")
    path = Path(compile_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"compile_dir {str(path)!r} is a file, not a folder: give a folder for the compiled steps' "
                         "packages (created if missing)")
    return path


@contextlib.contextmanager
def package_lock(path: Path) -> Iterator[bool]:
    """Hold the lock file beside `path` (``.lock``) while its package is looked for and built: another
    process waits, then finds the package built. Yields whether the lock is held: False when the
    folder cannot be written or the platform has no locks (a build is then still atomic)."""
    handle = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(path.with_suffix(".lock"), os.O_RDONLY | os.O_CREAT, 0o644)
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
    except OSError:  # a read-only folder, a file system without locks: go on without
        if handle is not None:
            os.close(handle)
        handle = None
    try:
        yield handle is not None and fcntl is not None
    finally:
        if handle is not None:
            os.close(handle)


class ExportedStep(torch.nn.Module):
    """A runner's step function as a module whose buffers are the cache's: export sees the step write them."""

    def __init__(self, step: Callable, runner) -> None:
        super().__init__()
        self.step, self.model, self.runner = step, runner.model, runner
        for name, buffer in static_cache_buffers(runner.cache).items():
            self.register_buffer(name, buffer, persistent=False)

    def forward(self, input_ids, position_ids, allowed, length, slots):  # (w,), (w,), (w, w), (), (n,) -> (w, V)
        return self.step(self.runner, input_ids, position_ids, allowed, length, slots)


def build_package(runner, path: Path, step: Callable, record: dict[str, str]) -> None:
    """Export `step` over a scratch runner of the same model and cache length (the runner's own
    cache is never traced), its width dynamic when `runner` has several and its span (the slots
    it attends over) when the runner `cuts`, compile it ahead of time with `record` inside, save
    it at `path`."""
    scratch, d, width, slots = type(runner)(runner.model, runner.max_length), runner.device, runner.widths[-1], runner.max_length
    cuts = runner.cuts()
    # an example span below M and apart from the width: traced at M itself (or at the width's value) it is pinned there
    span = next((v for v in range(slots - 1, 1, -1) if v != width), None) if cuts else slots
    if span is None:
        raise ValueError(f"a static cache of {slots} slots is too short for a package whose steps cut their span")
    example = (torch.zeros(width, dtype=torch.long, device=d), torch.arange(width, device=d),
               torch.ones(width, width, dtype=torch.bool, device=d).tril_(), torch.tensor(0, device=d),
               torch.arange(span, device=d))
    w = torch.export.Dim("width", min=1, max=width) if len(runner.widths) > 1 else None  # one program for widths 1..widest
    n = torch.export.Dim("span", min=1, max=slots) if cuts else None  # and for every span up to M
    axes = ({0: w}, {0: w}, {0: w, 1: w}, {}, {0: n})  # ids, positions, mask, length, slots
    dynamic = None if w is None and n is None else tuple({a: dim for a, dim in x.items() if dim is not None} for x in axes)
    meta = dict(record, name=runner.model.config.name_or_path or "")  # the name, for people only: not checked
    configs = dict(PACKAGE_CONFIGS[runner.compile_mode], **WEIGHTS_APART,
                   **{"aot_inductor.metadata": {f"ladref.{k}": v for k, v in meta.items()}})
    path.parent.mkdir(parents=True, exist_ok=True)
    # first, before any work: a folder that cannot be written fails here. Written whole, then
    # renamed: never half a file under the package's name
    handle, part = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".part.pt2", dir=path.parent)  # torch wants .pt2
    os.close(handle)
    try:
        with torch.no_grad(), runner.attending():  # the attention its eager passes run
            step(scratch, example[0][:1], example[1][:1], example[2][:1, :1], *example[3:])  # allocates its cache buffers
            program = torch.export.export(ExportedStep(step, scratch), example, dynamic_shapes=dynamic, strict=True)
            torch._inductor.aoti_compile_and_package(program, package_path=part, inductor_configs=configs)
        os.chmod(part, 0o644)  # mkstemp's file is private; a package is as readable as a cache file
        os.replace(part, path)
    finally:
        if os.path.exists(part):
            os.remove(part)


def load_package(path: Path, runner) -> Callable:
    """The package at `path` loaded, its cache buffers bound to `runner`'s (user-managed: no copy),
    as a step called as `ladref.fast.static.static_step` is."""
    loaded = torch._inductor.aoti_load_package(str(path))
    loaded.loader.load_constants(static_cache_buffers(runner.cache), False, False, True)

    def run(_runner, input_ids, position_ids, allowed, length, slots):
        return loaded(input_ids, position_ids, allowed, length, slots)

    return run


def _why(error: BaseException) -> str:
    """An exception in one short line: torch's errors run to many lines."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text[:200]}"


def packaged_step(runner, directory: Path, weights: str, step: Callable) -> tuple[Callable | None, bool]:
    """The step of every width of `runner` from its package in `directory`, bound to the runner's
    cache; built from `step` first (`build_package`) when missing or unusable; `weights`: the
    model's `weights_digest`.

    Never raises for what is on disk: a package that cannot be used is reported with a warning and
    built again; a package that cannot be built or loaded (a read-only or full folder) is reported,
    and the step is then None: the caller compiles it in the process.

    Returns:
        (a step called as `static_step` is, or None; whether a usable package was already on disk).
    """
    record = package_record(runner, weights)
    path = directory / package_name(runner, weights)
    with package_lock(path):
        if path.exists():
            problem = package_problem(path, record)
            if problem is None:
                try:
                    return load_package(path, runner), True
                except Exception as error:  # an untrusted file: torch's loader may raise anything
                    problem = f"torch could not load it ({_why(error)})"
            warnings.warn(f"compiled step {path} cannot be used: {problem}; building it again", stacklevel=4)
        try:
            build_package(runner, path, step, record)
            return load_package(path, runner), False
        except Exception as error:  # a read-only or full folder (OSError, or torch's writer's RuntimeError), ...
            reason = error.strerror if isinstance(error, OSError) and error.strerror else _why(error)
            warnings.warn(f"could not build or load a compiled step in {directory} ({reason}); compiling it in this "
                          "process instead, as without compile_dir", stacklevel=4)
            return None, False
