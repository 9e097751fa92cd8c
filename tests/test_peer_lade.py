"""ladref against hao-ai-lab's LADE 0.0.2 (benchmarks/peer_lade), on one short prompt.

Marked ``peer_lade`` and kept out of the default run: they need LADE's own environment and the
converted model, both made by ``python benchmarks/peer_lade/run.py`` under build/peer_lade (they
skip, saying so, when those are missing; nothing is ever downloaded here).

    python -m pytest -m peer_lade tests/test_peer_lade.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peer_lade"))

import peer_env  # noqa: E402
from convert import EOS_ID, MODEL_DIR, legacy_config  # noqa: E402

pytestmark = pytest.mark.peer_lade
NEW_TOKENS = 24
CONFIG = (5, 7, 7)  # N, W, G

needs_peer = pytest.mark.skipif(
    not (peer_env.is_ready() and (MODEL_DIR / "peer_lade.json").exists()),
    reason="LADE's environment or the converted model is missing under build/peer_lade; "
    "make them with: python benchmarks/peer_lade/run.py --limit 1 --max-new-tokens 16",
)


def test_legacy_config_writes_back_what_transformers_4_reads():
    saved = {"rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "dtype": "float32",
             "quantization_config": {"quant_method": "gguf"}}
    legacy = legacy_config(saved)
    assert legacy["rope_theta"] == 100000.0 and legacy["torch_dtype"] == "float32"
    assert "quantization_config" not in legacy and "quantization_config" in saved
    with pytest.raises(ValueError, match="rope_theta"):
        legacy_config({"dtype": "float32"})


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """(ladref-side model, LADE worker, prompt ids) on one thread each."""
    from ladref_api import encode_prompts, load_prompts
    from measure import LadeWorker
    from run import load_ladref_side

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load_ladref_side(MODEL_DIR, "cpu", "float32", "eager")
    ids = encode_prompts(tokenizer, load_prompts("math", 1))[0][0].tolist()
    worker = LadeWorker(peer_env.peer_python(), MODEL_DIR, "cpu", "float32", 1, tmp_path_factory.mktemp("lade") / "worker.log")
    yield model, worker, ids
    worker.close()
    torch.set_num_threads(threads)


def run(method, sides):
    from measure import record, run_method

    model, worker, ids = sides
    prompt = type("Prompt", (), {"dataset": "math", "prompt_id": "gsm8k/0"})()
    return record(method, prompt, ids, run_method(method, ids, NEW_TOKENS, model, worker, EOS_ID))


@needs_peer
def test_lade_runs_on_the_converted_model_with_the_right_rope(sides):
    _, worker, _ = sides
    assert worker.info["transformers"] == "4.34.1"
    assert worker.info["rope_theta"] == 100000.0  # not 4.x's silent default of 10000


@needs_peer
def test_lade_output_equals_ladref_greedy_and_hook_counts_debug_steps(sides):
    from measure import Method

    reference = run(Method("ladref", "greedy"), sides)
    lade_greedy = run(Method("lade", "greedy"), sides)
    lade = run(Method("lade", "lookahead", CONFIG), sides)
    assert len(reference["tokens"]) == NEW_TOKENS
    assert lade_greedy["tokens"] == reference["tokens"]
    assert lade["tokens"] == reference["tokens"]
    assert lade["steps"] == lade["debug_steps"] < NEW_TOKENS  # the lm_head hook counts what DEBUG prints


@needs_peer
def test_ladref_mimic_reproduces_lades_step_schedule(sides):
    from measure import Method

    lade = run(Method("lade", "lookahead", CONFIG), sides)
    mimic = run(Method("ladref", "mimic-lade", CONFIG), sides)
    assert mimic["tokens"] == lade["tokens"]
    assert mimic["steps"] == lade["steps"]
    assert mimic["fed"] == lade["fed"]  # same window sizes and candidates verified, step by step
