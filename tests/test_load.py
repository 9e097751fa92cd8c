"""Speculation under load: the engines' rules, and the benchmark that sets them beside ladref's decoders."""

from __future__ import annotations

import pytest
from strategies import tiny_model

from ladref import greedy_decode
from ladref.bench.engines import ChainController, chain_decode, threshold_decode
from ladref.bench.load import LoadSettings, canonical_load_method, predict, run_load
from ladref.bench.load_report import GPU_SHAPED, load_markdown, plot_load
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")
BATCH = [[1, 2, 3], [4, 5], [7, 1], [9], [2, 2, 8], [11, 3]]
CPU_LIKE, GPU_LIKE = CostSurface.roofline(0.015, 0.004), CostSurface.roofline(0.01, 0.00002)


def drafted(result) -> list[int]:
    return [sum(r.stats.draft_tokens_per_step) for r in result]


def test_the_threshold_rule_drafts_only_in_a_small_batch():
    model = tiny_model("llama", 16, 0)
    greedy = [greedy_decode(model, p, 30, eos_token_id=[]).token_ids for p in BATCH]
    small, large = (threshold_decode(model, BATCH[:b], 30, threshold=2, eos_token_id=[]) for b in (2, 6))
    assert small.token_ids == greedy[:2] and large.token_ids == greedy
    assert min(drafted(small)) > 0 and drafted(large) == [0] * 6


def test_the_chain_controller_prices_draft_length_on_the_surface():
    model = tiny_model("llama", 16, 0)
    greedy = [greedy_decode(model, p, 30, eos_token_id=[]).token_ids for p in BATCH]
    cpu, gpu = (chain_decode(model, BATCH, 30, surface=s, max_len=4, eos_token_id=[]) for s in (CPU_LIKE, GPU_LIKE))
    assert cpu.token_ids == gpu.token_ids == greedy
    assert drafted(cpu) == [0] * 6 and min(drafted(gpu)) > 0 and gpu.passes < cpu.passes
    controller = ChainController(GPU_LIKE, max_len=4)
    assert controller.length(8, 0) == 4  # flat: the longest chain
    for _ in range(50):
        controller.learn(4, 0)  # every draft rejected
    assert controller.alpha < 0.05
    assert ChainController(CPU_LIKE, 4, alpha=controller.alpha).length(1, 0) == 2  # alone, 3 tokens cost one weight read
    assert ChainController(CPU_LIKE, 4, alpha=controller.alpha).length(4, 0) == 0  # 4 rows: every token costs


def test_the_engines_rules_say_when_the_next_drafts_need_not_be_proposed():
    from types import SimpleNamespace

    from ladref.bench.engines import Chain, Threshold

    assert Threshold(SimpleNamespace(rows=2), 2).may_draft(0, None) and not Threshold(SimpleNamespace(rows=3), 2).may_draft(0, None)
    controller = ChainController(CPU_LIKE, 4, alpha=0.02)
    assert Chain(SimpleNamespace(rows=1), controller).may_draft(0, None)  # alone: a chain of 2 pays
    assert not Chain(SimpleNamespace(rows=4), controller).may_draft(0, None)  # 4 rows: none does


def test_the_load_benchmark_checks_every_row_and_prices_what_it_measured(tmp_path):
    model = tiny_model("llama", 16, 0)
    settings = LoadSettings(batches=(1, 3), methods=("greedy", "generate", "prompt_lookup", "threshold", "chain", "adaptive"),
                            max_new_tokens=12, lookup_tokens=3)
    rows = run_load(model, [BATCH[i] for i in range(6)], settings, GPU_LIKE, eos=[])
    assert {(r.batch, r.method) for r in rows} == {(b, m) for b in (1, 3) for m in settings.methods}
    for r in rows:
        assert r.rows == 6 and r.tokens_per_s > 0
        if r.method != "generate":  # transformers' rows stop at the model's own EOS, if it has one
            assert r.new_tokens == 6 * 12 and r.rows_equal_batched_greedy == 6 and r.rows_apart_from_batch_1 == []
    assert next(r for r in rows if r.batch == 3 and r.method == "greedy").speedup == 1.0
    gpu = predict(rows, GPU_SHAPED, kv=8)
    assert "generate" not in gpu and gpu["greedy"] == {1: 1.0, 3: 1.0}
    lookup = next(r for r in rows if r.batch == 3 and r.method == "prompt_lookup")
    assert gpu["prompt_lookup"][3] == pytest.approx(lookup.compression, rel=1e-3)  # flat: the speedup is S
    assert "| 3 | adaptive |" in load_markdown(rows, gpu, gpu) and "predicted, CPU surface" in load_markdown(rows, gpu, gpu)
    assert "predicted, GPU surface" in load_markdown(rows, gpu, gpu, "cuda")  # a GPU's table names its own surface
    assert plot_load(rows, gpu, tmp_path / "load.png", "test", "cuda").stat().st_size > 0


def test_unknown_methods_are_named():
    with pytest.raises(ValueError, match="unknown method 'beam' for --batch; choose from greedy, generate"):
        canonical_load_method("beam")


def test_every_batch_is_timed_in_protocol_rounds_and_a_batch_that_never_settles_is_flagged():
    from ladref.bench.load_report import load_markdown as table
    from ladref.bench.protocol import Protocol

    model, prompts = tiny_model("llama", 16, 0), [BATCH[i] for i in range(4)]
    quiet = LoadSettings(batches=(2,), methods=("greedy", "prompt_lookup"), max_new_tokens=8, lookup_tokens=3)
    for r in run_load(model, prompts, quiet, GPU_LIKE, eos=[]):
        assert len(r.batches) == 2 and r.rounds == sum(len(b["rounds_s"]) for b in r.batches) >= 4
        assert all(len(b["rounds_s"]) == len(b["cpu_shares"]) == len(b["loads"]) == len(b["disturbed"]) for b in r.batches)
        assert r.seconds <= sum(max(b["rounds_s"]) for b in r.batches) + 1e-3  # the figure is a round, per batch
    # negative control: a CPU share no call can reach marks every round disturbed, so every batch is
    # measured the most rounds allowed and flagged, and the table counts the flags
    busy = LoadSettings(batches=(2,), methods=("greedy", "prompt_lookup"), max_new_tokens=8, lookup_tokens=3,
                        protocol=Protocol(max_rounds=3, min_share=5.0))
    rows = run_load(model, prompts, busy, GPU_LIKE, eos=[])
    assert all(r.flagged == 2 and r.rounds == 6 and r.disturbed == 6 for r in rows)
    assert "| 2 | prompt_lookup |" in table(rows, {}, {}) and table(rows, {}, {}).splitlines()[2].endswith("| 6 | 2 |")
    assert all(r.vs_greedy["prompts"] == 2 and r.vs_greedy["low"] <= r.vs_greedy["geomean"] <= r.vs_greedy["high"] for r in rows)


def test_each_batch_size_decodes_whole_batches():
    """Five prompts: B = 2 and 4 decode 4 of them (no batch of 1 at B = 2 or 4), B = 8 all 5 at once
    (fewer prompts than B: the one batch there is); the rows decoded are greedy's."""
    model, prompts = tiny_model("llama", 16, 0), [BATCH[i] for i in range(5)]
    settings = LoadSettings(batches=(1, 2, 4, 8), methods=("greedy", "prompt_lookup"), max_new_tokens=6, lookup_tokens=3)
    rows = run_load(model, prompts, settings, GPU_LIKE, eos=[])
    assert {(r.batch, r.method): (r.rows, len(r.batches)) for r in rows} == {
        (b, m): ({1: 5, 2: 4, 4: 4, 8: 5}[b], {1: 5, 2: 2, 4: 1, 8: 1}[b]) for b in (1, 2, 4, 8) for m in settings.methods}
    assert all(r.rows_equal_batched_greedy == r.rows and r.rows_apart_from_batch_1 == [] for r in rows)
