"""What a compiled step's package was built for: its record, its name, and the check before it is loaded.

Every package carries a record (`package_record`: model class, config and weights digests, dtype,
device, cache length, widths, mode, threads, processor, kernels, the slots a step attends over,
torch and transformers versions), stored inside it as AOTInductor metadata. Its file name is a
digest of that record (`package_name`), and `package_problem` reads the record back from the
archive, without loading the package, and says why it must not be loaded for a runner, if it
must not (`ladref.fast.precompiled` uses these).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from pathlib import Path

import torch
import transformers

FORMAT = "ladref.package/4"
PACKAGE_FILE = re.compile(r"step-w\d+(-\d+)?-[0-9a-f]{32}\.pt2")
"""The names of ladref's packages; beside each, its ``.lock`` and, while it is built, ``.<stem>.*.part.pt2``."""


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of every parameter's and buffer's name, dtype, shape and bytes (frozen into a package):
    SHA-256 (about 0.4 s for SmolLM2-135M's 540 MB where the processor hashes it in hardware), 32 hex digits."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())  # its buffer, not a copy
    return digest.hexdigest()[:32]


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def config_digest(config) -> str:
    """A digest of what the model computes: its config, less where it was read from (its name or path,
    and the mark transformers leaves on a model read from a GGUF file), so its saved copy matches."""
    fields = {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "quantization_config")}
    return _digest(json.dumps(fields, sort_keys=True, default=str))


def package_widths(runner) -> str:
    """The widths `runner`'s package serves: "8" (one width), or "1-64" (every width up to the widest)."""
    widest = runner.widths[-1]
    return str(widest) if len(runner.widths) == 1 else f"1-{widest}"


def package_record(runner, weights: str) -> dict[str, str]:
    """Everything the compiled code of `runner`'s steps depends on, as strings; `weights`: the
    model's `weights_digest`. Hashed into the package's name and stored inside the package."""
    model, device = runner.model, runner.device
    return {"format": FORMAT, "model": type(model).__name__, "config": config_digest(model.config),
            "weights": weights, "dtype": str(runner.dtype), "device": str(device), "max_length": str(runner.max_length),
            "width": package_widths(runner), "mode": str(runner.compile_mode), "threads": str(torch.get_num_threads()),
            "processor": torch.backends.cpu.get_cpu_capability() if device.type == "cpu" else torch.cuda.get_device_name(device),
            "kernels": "+".join(k.name.lower() for k in runner.kernels) if runner.kernels else "default",
            "span": "used" if runner.cuts() else "all",
            "torch": torch.__version__, "transformers": transformers.__version__}


def package_name(runner, weights: str) -> str:
    """The file name of `runner`'s package: its widths and a digest of everything its compiled code depends on."""
    return f"step-w{package_widths(runner)}-{_digest(json.dumps(package_record(runner, weights), sort_keys=True))}.pt2"


def read_package_record(path: str | os.PathLike) -> dict[str, str]:
    """The `package_record` stored in the package at `path`, read from the archive without loading it.

    Raises:
        OSError, zipfile.BadZipFile: the file cannot be read, or is not a whole archive.
        ValueError: an archive without a ladref record (another program's, an older ladref's).
    """
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith("_metadata.json") and "/aotinductor/" in name:
                data = json.loads(archive.read(name))
                if isinstance(data, dict) and "ladref.format" in data:
                    return {key[len("ladref."):]: value for key, value in data.items() if key.startswith("ladref.")}
    raise ValueError("it holds no ladref record (not built by this version of ladref)")


def package_problem(path: Path, expected: dict[str, str]) -> str | None:
    """Why the package at `path` must not be loaded for `expected` (a `package_record`), or None."""
    try:
        found = read_package_record(path)
    except (OSError, zipfile.BadZipFile, ValueError, KeyError) as error:
        return f"not a readable package, truncated or another format ({error})"
    differ = [key for key in expected if found.get(key) != expected[key]]
    if differ:
        return f"built for something else: its {', '.join(differ)} differ from this runner's"
    return None
