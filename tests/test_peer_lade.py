"""ladref against hao-ai-lab's LADE 0.0.2 (benchmarks/peer_lade), on one short prompt.

The tests that run LADE are marked ``peer_lade`` and kept out of the default run: they need LADE's
own environment and the converted model, both made by ``python benchmarks/peer_lade/run.py`` under
build/peer_lade (they skip, saying so, when those are missing; nothing is ever downloaded here).
The others check the benchmark's own code (the config conversion, the LADE mimics) on tiny models.

    python -m pytest -m peer_lade tests/test_peer_lade.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peer_lade"))

import peer_env  # noqa: E402
from compare import compare  # noqa: E402
from convert import EOS_ID, MODEL_DIR, legacy_config  # noqa: E402
from ladref_api import DraftTree, LookaheadConfig, greedy_decode, lookahead_decode  # noqa: E402
from mimic import LadeChoices, lade_verify, mimic_decode  # noqa: E402
from strategies import tiny_model  # noqa: E402

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


def test_lade_verify_keeps_the_first_longest_chain_and_caps_a_full_match():
    # Two chains share their first token; greedy (root 5, then 6 after it, 8 after 6) agrees with
    # the SECOND one further. A trie walk would stop in the first chain; LADE checks each chain.
    chains = DraftTree.chains([[5, 6, 7], [5, 6, 8]], "lookahead")
    preds = torch.tensor([6, 8, 0, 6, 8, 9])  # argmax after each node
    verdict = lade_verify(chains, 5, preds, limit=3)
    assert verdict.path == [3, 4, 5] and verdict.tokens.tolist() == [5, 6, 8, 9]
    capped = lade_verify(chains, 5, preds, limit=2)  # LADE: N-2 candidate tokens, then the model's own;
    assert capped.path == [0, 1] and capped.tokens.tolist() == [5, 6, 8]  # capped, both tie: the first is kept
    assert lade_verify(DraftTree.chains([], "lookahead"), 4, torch.empty(0, dtype=torch.long), 3).tokens.tolist() == [4]


@pytest.mark.parametrize("arch, seed, nwg", [("llama", 0, (5, 3, 3)), ("gpt2", 1, (4, 2, 4)), ("llama", 2, (3, 5, 2))])
def test_mimics_decode_greedy_and_without_lades_choices_like_ladref(arch, seed, nwg, one_thread):
    model, prompt, (n, w, g) = tiny_model(arch, 16, seed, "eager"), [3, 1, 4, 1, 5, 9, 2, 6], nwg
    config = LookaheadConfig(window_size=w, ngram_size=n, max_candidates=g, pool_from_prompt=False)
    ladref = lookahead_decode(model, prompt, 40, config=config)  # tiny models have no EOS
    plain = mimic_decode(model, prompt, 40, config, LadeChoices(seed_window=False, cap_full_match=False), eos_token_id=-1)
    assert plain.token_ids == ladref.token_ids and plain.steps == ladref.stats.steps  # flat chains or trie: same schedule
    assert sum(plain.fed) >= sum(ladref.stats.forward_tokens_per_step)  # the trie feeds shared prefixes once
    greedy = greedy_decode(model, prompt, 40).token_ids
    for choices in (LadeChoices(True, False), LadeChoices(False, True), LadeChoices(True, True)):
        mimic = mimic_decode(model, prompt, 40, config, choices, eos_token_id=-1)
        assert mimic.token_ids == greedy and len(mimic.fed) == mimic.steps < 40


def test_compare_reads_a_run_that_still_names_gsm8k_math(tmp_path):
    row = {"dataset": "gsm8k", "prompt_id": "gsm8k/0", "stack": "ladref", "method": "lookahead", "config": "5,7,7",
           "tokens": [7, 8, 9], "steps": 2, "fed": [30, 28]}
    meta = {"max_new_tokens": 3, "dtype": "float32", "device": "cpu"}

    def run(name, **changes):
        (tmp_path / name).mkdir()
        (tmp_path / name / "peer_lade.json").write_text(json.dumps({"meta": meta, "records": [{**row, **changes}]}))
        return tmp_path / name

    committed = run("committed", dataset="math", fed=[30, 30])
    assert compare(committed, run("fewer_fed")) == ([], ["gsm8k/gsm8k/0/ladref/lookahead/5,7,7: tokens fed 60 -> 58 (same tokens and steps)"], 1)
    assert len(compare(committed, run("more_steps", steps=3))[0]) == 1
    assert compare(committed, run("other_prompt", prompt_id="gsm8k/1")) == ([], [], 0)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """(ladref-side model, LADE worker, prompt ids) on one thread each."""
    from ladref_api import encode_prompts, load_prompts
    from measure import LadeWorker
    from run import load_ladref_side

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load_ladref_side(MODEL_DIR, "cpu", "float32", "eager")
    ids = encode_prompts(tokenizer, load_prompts("gsm8k", 1))[0][0].tolist()
    worker = LadeWorker(peer_env.peer_python(), MODEL_DIR, "cpu", "float32", 1, tmp_path_factory.mktemp("lade") / "worker.log")
    yield model, worker, ids
    worker.close()
    torch.set_num_threads(threads)


def run(method, sides):
    from measure import record, run_method

    model, worker, ids = sides
    prompt = type("Prompt", (), {"dataset": "gsm8k", "prompt_id": "gsm8k/0"})()
    return record(method, prompt, ids, run_method(method, ids, NEW_TOKENS, model, worker, EOS_ID))


@pytest.mark.peer_lade
@needs_peer
def test_lade_runs_on_the_converted_model_with_the_right_rope(sides):
    _, worker, _ = sides
    assert worker.info["transformers"] == "4.34.1"
    assert worker.info["rope_theta"] == 100000.0  # not 4.x's silent default of 10000


@pytest.mark.peer_lade
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


@pytest.mark.peer_lade
@needs_peer
def test_ladref_mimic_reproduces_lades_step_schedule(sides):
    from measure import Method

    lade = run(Method("lade", "lookahead", CONFIG), sides)
    mimic = run(Method("ladref", "mimic-lade", CONFIG), sides)
    assert mimic["tokens"] == lade["tokens"]
    assert mimic["steps"] == lade["steps"]
    assert mimic["fed"] == lade["fed"]  # same window sizes and candidates verified, step by step
