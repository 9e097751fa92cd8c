"""`CostCache`: measured cost curves kept per model and machine, in memory or in a JSON file.

A `ladref.pricing.cost.CostModel` costs seconds to measure (17-30 s for SmolLM2-135M on 2 CPU cores)
and depends on the model, its parameters, device, dtype, thread count, runner and processor. The
cache keys each curve by exactly those (`ladref.pricing.timing.describe`) plus the widths and KV
lengths measured, so a curve is measured once per machine: `adaptive_decode` keeps its curves in
the user's cache folder (`default_cache_path`), compiled steps beside their packages. No
module-level state: a cache is an object, its file the only thing shared between processes.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..models import user_cache_folder
from ..runner import ModelRunner, Runner
from .cost import DEFAULT_KV_LENGTHS, FORMAT, CostModel, default_widths
from .timing import Progress, describe, processor


def default_cache_path() -> Path:
    """Where `adaptive_decode` keeps measured curves: ``cost.json`` in `ladref.models.user_cache_folder`."""
    return user_cache_folder() / "cost.json"


def read_cache_file(path: Path) -> dict[str, CostModel]:
    """The curves in a cache file written by `CostCache.save` ({} when there is none yet)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT + " cache":
            raise ValueError("another format")
        return {key: CostModel.from_dict(model) for key, model in data["models"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:  # unreadable, not JSON, not ours
        raise ValueError(f"{path} is not a {FORMAT} cache file ({type(error).__name__}: {error})") from None


class CostCache:
    """Measured cost models, keyed by what a measurement depends on, optionally kept in a JSON file.

    The key is `ladref.pricing.timing.describe` (model, parameters, device, dtype, threads, runner), the
    processor and the widths and KV lengths measured. Given a `path`, the cache starts from that
    file and writes every new measurement back to it (atomically, merged with what another
    process may have added meanwhile), so a later call or process measures nothing; the file
    belongs to the machine that measured it. A file that cannot be written (a read-only folder,
    a full disk) is reported with a warning; the curve is still kept in memory.

    Args:
        path: an optional JSON file (read if it exists); None keeps the curves in this object only.

    Raises:
        ValueError: `path` names a folder, or a file that is not a cost cache.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = None if path is None else Path(path)
        if self.path is not None and self.path.is_dir():
            raise ValueError(f"CostCache path {self.path} is a folder; give a file name, e.g. {self.path / 'cost.json'}")
        self.models: dict[str, CostModel] = {} if self.path is None else read_cache_file(self.path)

    @classmethod
    def default(cls, path: str | os.PathLike | None = None) -> CostCache:
        """The cache file at `path`; default the user's, at `default_cache_path` (what `adaptive_decode`
        uses when given no `cost` or `cache`). A file there that cannot be read is reported with a
        warning and measured anew."""
        path = default_cache_path() if path is None else Path(path)
        try:
            return cls(path)
        except ValueError as error:
            warnings.warn(f"{error}; its curves will be measured again and the file rewritten", stacklevel=2)
            cache = cls()
            cache.path = path
            return cache

    @classmethod
    def given(cls, cache: object, path: str | os.PathLike | None = None) -> CostCache:
        """A decoder's `cache` argument: the cache itself, or when it is None ``default(path)``: the
        file at `path` (e.g. beside compiled steps' packages), default the user's.

        Raises:
            TypeError: anything else than a CostCache or None.
        """
        if cache is None:
            return cls.default(path)
        if not isinstance(cache, CostCache):
            raise TypeError(f"cache must be a ladref.pricing.cost_cache.CostCache, got {type(cache).__name__}")
        return cache

    def __len__(self) -> int:
        return len(self.models)

    def __bool__(self) -> bool:
        return True  # an empty cache is still a cache: `cache or CostCache()` must not replace it

    def __repr__(self) -> str:
        return f"CostCache({str(self.path)!r}, {len(self)} curves)" if self.path else f"CostCache({len(self)} curves, in memory)"

    def key(self, model: torch.nn.Module, runner: Runner, widths: Sequence[int], kv_lengths: Sequence[int]) -> str:
        """What a measurement depends on, as the cache's key."""
        return f"{describe(model, runner)} | {processor(runner.device)} | widths {list(widths)} | kv {list(kv_lengths)}"

    def get(self, model: torch.nn.Module, runner: Runner | None = None, *, widths: Sequence[int] | None = None,
            kv_lengths: Sequence[int] = DEFAULT_KV_LENGTHS, repeats: int = 5, attention_backend: str = "auto",
            progress: Progress | None = None) -> CostModel:
        """The cached model for this (model, device, dtype, threads, runner, processor, widths, KV lengths), measured if new.

        Arguments as `CostModel.measure`.
        """
        runner = ModelRunner(model, attention_backend) if runner is None else runner
        widths = default_widths(runner.device) if widths is None else tuple(widths)
        return self.remember(self.key(model, runner, widths, kv_lengths),
                             lambda: CostModel.measure(model, widths, kv_lengths, repeats, runner, progress=progress))

    def remember(self, key: str, measure: Callable[[], CostModel]) -> CostModel:
        """The curve kept under `key` (in memory, or in the file since another process wrote it), else
        ``measure()``, kept and written back to the file."""
        if key not in self.models and self.path is not None:  # another process may have measured it meanwhile
            self.models.update(self._on_disk())
        if key not in self.models:
            self.models[key] = measure()
            if self.path is not None:
                try:
                    self.save(self.path)
                except OSError as error:
                    warnings.warn(f"could not write the measured cost curve to {self.path} ({error}); it is kept in "
                                  "memory only, so a later process measures it again", stacklevel=3)
        return self.models[key]

    def _on_disk(self) -> dict[str, CostModel]:
        """The file's curves now, or {} when it is missing or unreadable (it is then rewritten whole)."""
        try:
            return read_cache_file(self.path)
        except ValueError:
            return {}

    def save(self, path: str | os.PathLike) -> Path:
        """Write every model to a JSON file (folders created), keeping the curves already in it that
        this cache lacks; written to a temporary file and renamed, so no reader sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        on_disk = self._on_disk() if path == self.path else {}
        models = {key: model.to_dict() for key, model in {**on_disk, **self.models}.items()}
        fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps({"format": FORMAT + " cache", "models": models}, indent=1) + "\n")
            os.replace(scratch, path)
        except BaseException:
            Path(scratch).unlink(missing_ok=True)
            raise
        return path
