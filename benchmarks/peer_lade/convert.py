"""Convert the embedded model (GGUF, read by `ladref.load_default_model`) to an HF folder both stacks read.

transformers 5 writes a config transformers 4.x misreads: the rotary base lives in
``rope_parameters`` (4.x silently falls back to ``rope_theta = 10000``), the dtype is ``dtype``
instead of ``torch_dtype``, and a ``quantization_config`` names the GGUF "quantization" that was
already undone on loading. So the saved config gets ``rope_theta`` and ``torch_dtype`` written
back, loses ``quantization_config``, and ``generation_config.json`` is replaced by a minimal one
(no sampling, no logits processors: LADE asserts there are none). The weights are saved in float32
(the GGUF de-quantized once), so both stacks start from identical tensors.

    python benchmarks/peer_lade/convert.py [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "build" / "peer_lade" / "smollm2-135m-instruct"
EOS_ID = 2  # <|im_end|>: the chat turn's end (a tokenizer saved from the GGUF may say <|im_start|>)
GENERATION_CONFIG = {"bos_token_id": 1, "eos_token_id": EOS_ID, "pad_token_id": EOS_ID}


def legacy_config(config: dict) -> dict:
    """The transformers-5 config with the fields transformers 4.x reads written back.

    Args:
        config: the saved ``config.json`` as a dict.

    Returns:
        A copy with ``rope_theta``, ``torch_dtype`` and no ``quantization_config``.

    Raises:
        ValueError: when the rotary base cannot be found (4.x would silently use 10000).
    """
    out = {k: v for k, v in config.items() if k != "quantization_config"}
    theta = out.get("rope_theta") or (out.get("rope_parameters") or {}).get("rope_theta")
    if theta is None:
        raise ValueError("config has neither rope_theta nor rope_parameters['rope_theta']")
    out["rope_theta"] = float(theta)
    out["torch_dtype"] = out.get("torch_dtype") or out.get("dtype") or "float32"
    return out


def plain_copy(model):
    """The same weights in a model transformers will save (a GGUF-loaded one refuses: "quantized")."""
    import copy

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(model)(config).to(next(model.parameters()).dtype)
    fresh.load_state_dict(model.state_dict())
    return fresh.eval()


def stamp(gguf: Path) -> dict:
    """Identity of the source file (the folder is rebuilt when it changes)."""
    info = gguf.stat()
    return {"gguf": str(gguf), "size": info.st_size, "mtime": int(info.st_mtime)}


def convert(out_dir: Path = MODEL_DIR, force: bool = False) -> Path:
    """Write the HF folder (float32 safetensors, tokenizer, 4.x-readable config) once.

    Returns:
        `out_dir`.
    """
    from ladref_api import default_gguf_path, load_default_model

    gguf = default_gguf_path()
    marker = out_dir / "peer_lade.json"
    if not force and marker.exists() and json.loads(marker.read_text()) == stamp(gguf):
        return out_dir
    import torch

    print(f"[peer_lade] converting {gguf.name} to {out_dir}", flush=True)
    model, tokenizer = load_default_model(device="cpu", dtype=torch.float32)
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_copy(model).save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config_path.write_text(json.dumps(legacy_config(json.loads(config_path.read_text())), indent=2))
    (out_dir / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    marker.write_text(json.dumps(stamp(gguf)))
    return out_dir


if __name__ == "__main__":
    print(convert(Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL_DIR, force=True))
