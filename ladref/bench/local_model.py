"""The model a benchmark runs on: the embedded SmolLM2, or a local transformers causal-LM folder (``bench --model``)."""

from __future__ import annotations

from pathlib import Path

import torch

DEFAULT_NAME = "SmolLM2-135M-Instruct"
# files of which a saved tokenizer holds at least one (fast, sentencepiece, BPE / WordPiece vocabularies)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json",
                   "vocab.txt", "tokenizer_config.json")


def load_bench_model(path: str | None, device: str | None, dtype: torch.dtype | None):
    """The model, its tokenizer and its name, for ``python -m ladref bench``.

    Args:
        path: a folder written by ``save_pretrained`` (config, weights, tokenizer); None loads the
            embedded SmolLM2-135M-Instruct (`ladref.models.load_default_model`).
        device: where to put the model; default CUDA when available, else the CPU.
        dtype: the weights' dtype; default float16 on CUDA, float32 on the CPU.

    Returns:
        (model, tokenizer, name): the model in eval mode with SDPA attention, checked by
        `ladref.facts.check_model`; the name is the folder's name.

    Raises:
        ValueError: naming the problem: a missing path, a file, a folder without config.json or
            tokenizer files, a model that is not a causal LM or that ladref cannot decode, a device
            that is not available or a dtype it cannot compute in.
    """
    from ..facts import check_model
    from ..models import default_device, hidden_progress_bars, load_default_model

    if path is None:
        where = default_device(device)
        dtype = dtype or (torch.float16 if where.type == "cuda" else torch.float32)
        check_dtype(dtype, where)
        model, tokenizer = load_default_model(where, dtype)
        return model, tokenizer, DEFAULT_NAME
    folder = _checked_folder(path)
    config = _config(folder)
    model_type = getattr(config, "model_type", None)
    _check_causal(folder, model_type, config)
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise ValueError(f"model folder {str(folder)!r} holds no tokenizer files (one of {', '.join(TOKENIZER_FILES)}); "
                         "save the tokenizer there too (tokenizer.save_pretrained)")
    where = default_device(device)
    dtype = dtype or (torch.float16 if where.type == "cuda" else torch.float32)
    check_dtype(dtype, where)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"the tokenizer in {str(folder)!r} could not be loaded: {err}") from err
    try:
        with hidden_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa",
                                                         local_files_only=True)
    except ValueError as err:
        raise ValueError(f"{str(folder)!r} (model_type {model_type!r}) could not be loaded as a causal LM: {err}") from err
    except OSError as err:
        raise ValueError(f"the weights in {str(folder)!r} could not be loaded: {err}") from err
    model = model.to(where).eval()
    try:
        check_model(model)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{str(folder)!r}: {err}") from err
    return model, tokenizer, folder.name or str(getattr(config, "_name_or_path", "") or folder)


def _checked_folder(path: str) -> Path:
    """`path` as a folder holding a config.json, or a ValueError naming what is wrong."""
    folder = Path(path).expanduser().resolve()
    if not folder.exists():
        raise ValueError(f"model path {path!r} does not exist")
    if not folder.is_dir():
        raise ValueError(f"model path {path!r} is a file; --model takes a folder written by save_pretrained "
                         "(config.json, weights, tokenizer)")
    if not (folder / "config.json").is_file():
        raise ValueError(f"model folder {path!r} holds no config.json; --model takes a folder written by save_pretrained")
    return folder


def _config(folder: Path):
    """The folder's transformers config, or a ValueError naming the folder."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"the config.json in {str(folder)!r} could not be read: {err}") from err


def _check_causal(folder: Path, model_type: str | None, config) -> None:
    """A ValueError unless transformers' AutoModelForCausalLM knows the config's model type."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{str(folder)!r} holds a {model_type!r} model, which is not a causal LM "
                         "(AutoModelForCausalLM cannot load it); ladref decodes decoder-only causal LMs")


def check_dtype(dtype: torch.dtype, device: torch.device) -> None:
    """A ValueError unless a 2x2 matmul in `dtype` runs on `device`."""
    try:
        probe = torch.ones(2, 2, dtype=dtype, device=device)
        (probe @ probe).sum().item()
    except (RuntimeError, TypeError) as err:
        name = str(dtype).removeprefix("torch.")
        raise ValueError(f"dtype {name} is not supported on device {device}: {err}") from err
