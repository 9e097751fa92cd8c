"""``bench --host-overhead`` (`ladref.bench.host`): the command's parsing, its files and fields on a short
run (greedy and generate, B = 1, 2, 6 new tokens), its ratios, and the instruments' counts."""

from __future__ import annotations

import argparse
import json
import threading

import pytest
import torch

from ladref.bench.benchmark import add_arguments, run
from ladref.bench.host import NOTE, HostPoint, host_markdown, host_ratios
from ladref.bench.host_meter import profiled, repetitive_prompts, timed

pytestmark = pytest.mark.usefixtures("one_thread")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("host")
    argv = ["--host-overhead", "--batch", "1,2", "--max-new-tokens", "6", "--rounds", "1", "--method", "greedy,generate",
            "--no-progress", "--out", str(out)]
    threads = torch.get_num_threads()
    assert run(parse(argv)) == 0
    assert torch.get_num_threads() == threads  # the command sets its thread count back
    return json.loads((out / "host_overhead.json").read_text()), (out / "host_overhead.md").read_text()


def test_the_command_parses_its_options():
    args = parse(["--host-overhead", "--batch", "1,4,16", "--rounds", "5", "--method", "greedy,jacobi"])
    assert args.host_overhead and args.batch == (1, 4, 16) and args.rounds == 5 and args.method == ["greedy,jacobi"]
    assert args.max_new_tokens is None  # 48 for --host-overhead, 96 for the rest
    default = parse([])
    assert not default.host_overhead and default.rounds == 3 and default.batch is None


def test_an_unknown_method_is_refused_before_measuring(tmp_path):
    with pytest.raises(SystemExit, match="unknown host-overhead method 'beam'"):
        run(parse(["--host-overhead", "--method", "greedy,beam", "--out", str(tmp_path)]))
    assert not list(tmp_path.iterdir())


def test_the_short_run_saves_every_field(short_run):
    payload, markdown = short_run
    meta = payload["meta"]
    assert {"command", "machine", "torch", "transformers", "git_commit", "dtype"} <= set(meta)
    assert meta["dtype"] == "float32" and meta["settings"]["threads"] == 1 and meta["settings"]["max_new_tokens"] == 6
    points = [HostPoint(**p) for p in payload["points"]]
    assert [(p.method, p.batch) for p in points] == [("greedy", 1), ("generate", 1), ("greedy", 2), ("generate", 2)]
    for p in points:
        assert p.passes == 4 and p.tokens_per_pass == p.batch  # one token a row a pass, 6 - 2 tokens
        assert p.ms_per_pass > 0 and p.forward_ms_per_pass > 0
        assert p.ms_per_pass == pytest.approx(p.forward_ms_per_pass + p.host_ms_per_pass)
        assert p.ops_per_pass >= p.host_ops_per_pass > 0
        assert set(p.reads) == {"scalar", "sync", "tolist", "numpy", "item"}
        assert p.reads_per_pass == pytest.approx(p.reads["scalar"] + p.reads["sync"] + p.reads["tolist"] + p.reads["numpy"])
    assert all(p.match and p.reads_per_pass == 1.0 for p in points if p.method == "greedy")  # the batched step's one read
    ratios = payload["ratios"]
    assert (ratios["low_batch"], ratios["high_batch"]) == (1, 2) and ratios["host_over_greedy"] == {}
    assert set(ratios["host_growth"]) == set(ratios["ops_growth"]) == set(ratios["max_reads_per_pass"]) == {"greedy", "generate"}
    assert ratios["greedy_host_over_generate"] > 0 and payload["note"] == NOTE
    assert "| method | B | passes |" in markdown and "| greedy | 2 | 4 | 2.0 |" in markdown and NOTE in markdown


def test_the_ratios_are_the_largest_batch_over_the_smallest():
    def point(method: str, batch: int, host: float, ops: float, reads: float) -> HostPoint:
        return HostPoint(method, batch, 10, batch, 2 * host, host, host, ops, ops / 2, reads, {}, True)

    points = [point("greedy", 1, 1.0, 100, 1), point("greedy", 8, 4.0, 400, 8), point("lookahead", 1, 2.0, 200, 3),
              point("lookahead", 8, 6.0, 200, 2), point("generate", 1, 0.5, 50, 1), point("generate", 8, 1.0, 50, 1)]
    ratios = host_ratios(points)
    assert ratios["host_growth"] == {"greedy": 4.0, "lookahead": 3.0, "generate": 2.0}
    assert ratios["ops_growth"] == ratios["host_ops_growth"] == {"greedy": 4.0, "lookahead": 1.0, "generate": 1.0}
    assert ratios["max_reads_per_pass"] == {"greedy": 8, "lookahead": 3, "generate": 1}
    assert ratios["greedy_host_over_generate"] == 4.0 and ratios["host_over_greedy"] == {"lookahead": 1.5}
    meta = {"machine": "a CPU", "git_commit": "abc", "settings": {"model": "tiny", "max_new_tokens": 48, "rounds": 3,
                                                                 "adaptive_surface": "a roofline"}}
    assert "| lookahead | 3.00 | 1.00 | 1.00 | 3.0 | 1.50 |" in host_markdown(points, ratios, meta)


def test_the_profiled_counts_cover_every_thread_and_the_forward():
    model, x = torch.nn.Linear(4, 4), torch.arange(4.0)

    def elsewhere() -> None:
        x.tolist()
        int(x.sum())

    def call() -> None:
        with torch.no_grad():
            model(x)  # inside the forward: not host ops
        (x > 1).any().item()  # a scalar read (its item() call counted apart)
        x[x > 1]  # boolean indexing: a nonzero inside aten::index
        row = threading.Thread(target=elsewhere)
        row.start()
        row.join()

    counts, _ = profiled(model, call)
    assert counts["passes"] == 1 and counts["scalar"] == 2 and counts["sync"] == 1
    assert counts["tolist"] == 1 and counts["item"] == 1 and counts["numpy"] == 0
    assert counts["ops"] > counts["host_ops"] > 0
    wall, inside, passes = timed(model, lambda: model(x))
    assert passes == 1 and 0 < inside <= wall


def test_the_prompts_are_repetitive_and_nested():
    prompts = repetitive_prompts(4)
    assert [len(p) for p in prompts] == [60, 61, 62, 63] and prompts[:2] == repetitive_prompts(2)
    for p in prompts:
        period = next(n for n in range(5, 9) if p[n:] == p[:-n])
        assert all(0 <= t < 512 for t in p) and 5 <= period <= 8


def test_host_calls_are_timed_in_protocol_rounds_and_a_call_that_never_settles_is_flagged():
    from ladref.bench.host import measure_host_overhead
    from ladref.bench.host_meter import tiny_llama
    from ladref.bench.protocol import Protocol

    model = tiny_llama()
    quiet = measure_host_overhead(model, (1,), ("greedy",), 6, rounds=2)
    assert quiet[0].rounds >= 4 and quiet[0].flagged <= 2  # two calls (long, short), two rounds each at least
    # negative control: a CPU share no call reaches disturbs every round: the most rounds, both calls flagged
    busy = measure_host_overhead(model, (1,), ("greedy",), 6, protocol=Protocol(max_rounds=3, min_share=5.0))
    assert (busy[0].rounds, busy[0].disturbed, busy[0].flagged) == (6, 6, 2) and busy[0].match
