"""``python -m ladref bench --model PATH``: a local transformers causal-LM folder instead of the embedded SmolLM2.

The folders are built here, without any network: a tiny random Llama and a word-level tokenizer
with a chat template, saved by ``save_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ladref.bench.cli import main
from ladref.bench.local_model import load_bench_model

pytestmark = pytest.mark.usefixtures("one_thread")

CHAT_TEMPLATE = ("{% for m in messages %}<|user|> {{ m['content'] }} <|end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")
SPECIAL = ["<unk>", "<pad>", "<|user|>", "<|assistant|>", "<|end|>", "<eos>"]


def save_tokenizer(folder: Path):
    """A word-level tokenizer (special tokens, the letters, digits and some words) with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = SPECIAL + list("abcdefghijklmnopqrstuvwxyz0123456789.,?!$%:;'\"()+-*/=") + ["the", "a", "of", "and", "is"]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>",
                                        additional_special_tokens=SPECIAL[2:5])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return tokenizer


def save_model(folder: Path, vocab_size: int) -> None:
    """A random 2-layer Llama (hidden 32, 4 heads) with that vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=SPECIAL.index("<eos>"), pad_token_id=SPECIAL.index("<pad>"))
    LlamaForCausalLM(config).save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    tokenizer = save_tokenizer(folder)
    save_model(folder, len(tokenizer))
    return folder


def bench(*argv: str) -> int:
    return main(["bench", *argv])


def test_bench_runs_on_a_local_folder_and_names_it(tiny_folder, tmp_path, capsys):
    out = tmp_path / "out"
    status = bench("--model", str(tiny_folder), "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "4",
                   "--method", "lookahead", "--config", "2/2/2", "--threads", "1", "--no-progress", "--out", str(out))
    assert status == 0
    assert "model tiny-llama on cpu" in capsys.readouterr().out
    files = sorted(out.rglob("*.json"))
    assert files, f"no JSON in {out}"
    metas = [json.loads(f.read_text())["meta"] for f in files]
    assert any(meta.get("model") == "tiny-llama" for meta in metas)


def test_the_loader_returns_model_tokenizer_and_name(tiny_folder):
    model, tokenizer, name = load_bench_model(str(tiny_folder), "cpu", None)
    assert name == "tiny-llama"
    assert not model.training and model.dtype == torch.float32 and model.device.type == "cpu"
    assert model.config._attn_implementation == "sdpa"
    assert tokenizer.apply_chat_template([{"role": "user", "content": "a b"}], add_generation_prompt=True)


def error_of(*argv: str) -> str:
    with pytest.raises(SystemExit) as caught:
        bench(*argv, "--limit", "1", "--max-new-tokens", "2", "--no-progress")
    assert isinstance(caught.value.code, str), caught.value.code
    assert caught.value.code.startswith("error: ")
    return caught.value.code


def test_a_missing_path(tmp_path):
    assert "does not exist" in error_of("--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))


def test_a_file_instead_of_a_folder(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    assert "is a file" in error_of("--model", str(file), "--out", str(tmp_path / "out"))


def test_a_folder_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no config.json" in error_of("--model", str(tmp_path / "empty"), "--out", str(tmp_path / "out"))


def test_a_model_that_is_not_a_causal_lm(tmp_path):
    from transformers import T5Config

    folder = tmp_path / "t5"
    T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2).save_pretrained(folder)
    message = error_of("--model", str(folder), "--out", str(tmp_path / "out"))
    assert "'t5'" in message and "not a causal LM" in message and str(folder) in message


def test_a_folder_without_tokenizer(tiny_folder, tmp_path):
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((tiny_folder / name).read_bytes())
    assert "no tokenizer files" in error_of("--model", str(folder), "--out", str(tmp_path / "out"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_asked_for_without_cuda(tiny_folder, tmp_path):
    message = error_of("--model", str(tiny_folder), "--device", "cuda", "--dtype", "float16", "--out", str(tmp_path / "out"))
    assert "'cuda' was asked for, but CUDA is not available here" in message


def test_a_dtype_the_device_cannot_compute_in(tiny_folder, monkeypatch):
    real = torch.Tensor.__matmul__

    def refuse(a, b):
        if a.dtype == torch.bfloat16:
            raise RuntimeError('"addmm" not implemented for \'BFloat16\'')
        return real(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", refuse)
    with pytest.raises(ValueError, match="dtype bfloat16 is not supported on device cpu"):
        load_bench_model(str(tiny_folder), "cpu", torch.bfloat16)


def test_an_unknown_device(tiny_folder):
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_bench_model(str(tiny_folder), "gpu0", None)


def test_host_overhead_keeps_its_own_model(tmp_path):
    message = error_of("--host-overhead", "--model", str(tmp_path), "--out", str(tmp_path / "out"))
    assert "--host-overhead uses its own tiny model" in message
