"""Build LADE's own virtual environment under build/peer_lade/venv (idempotent).

LADE 0.0.2 (PyPI ``lade``, pure Python) patches transformers 4.34's Llama: it imports
``_expand_mask`` and passes legacy tuple KV caches, both gone in later transformers. So it gets a
separate environment: the same torch version as the calling interpreter (same kernels on both
sides), transformers 4.34.1 with the tokenizers / huggingface_hub it was released with, and
``lade`` itself with ``--no-deps`` (its metadata names no versions).

    python benchmarks/peer_lade/peer_env.py            # prints the interpreter path
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "peer_lade"
VENV = BUILD / "venv"
PEER_PINS = ("transformers==4.34.1", "tokenizers==0.14.1", "huggingface_hub==0.17.3", "numpy<2")
LADE_PIN = "lade==0.0.2"


def peer_python(venv_dir: Path = VENV) -> Path:
    """The peer environment's interpreter (it may not exist yet)."""
    return venv_dir / "bin" / "python"


def torch_pin() -> str:
    """``torch==X.Y.Z``: the calling interpreter's torch version without its local label (+cpu, +cu124)."""
    import torch

    return "torch==" + torch.__version__.split("+")[0]


def wanted(venv_dir: Path = VENV) -> dict:
    """What the environment must hold; stored in ``<venv>/peer_lade.json`` once installed."""
    return {"pins": [torch_pin(), *PEER_PINS, LADE_PIN], "python": sys.version.split()[0], "venv": str(venv_dir)}


def is_ready(venv_dir: Path = VENV) -> bool:
    """True when the environment exists and was built with the current pins."""
    stamp = venv_dir / "peer_lade.json"
    return peer_python(venv_dir).exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted(venv_dir)


def pip(venv_dir: Path, *args: str) -> None:
    """Run the peer environment's pip (output passed through)."""
    subprocess.run([str(peer_python(venv_dir)), "-m", "pip", "install", "--disable-pip-version-check", *args], check=True)


def build(venv_dir: Path = VENV, force: bool = False) -> Path:
    """Create (or reuse) the peer environment and return its interpreter.

    Args:
        venv_dir: where to put it.
        force: rebuild even when the stamp says it is up to date.
    """
    if is_ready(venv_dir) and not force:
        return peer_python(venv_dir)
    print(f"[peer_lade] building LADE's environment in {venv_dir}", flush=True)
    venv.EnvBuilder(clear=True, with_pip=True).create(venv_dir)
    pip(venv_dir, torch_pin())
    pip(venv_dir, *PEER_PINS)
    pip(venv_dir, "--no-deps", LADE_PIN)
    (venv_dir / "peer_lade.json").write_text(json.dumps(wanted(venv_dir), indent=1))
    return peer_python(venv_dir)


if __name__ == "__main__":
    print(build(force="--force" in sys.argv[1:]))
