"""What a new user sees first: a quiet model load and a readable one-line result."""

import inspect
import sys

import pytest

from ladref.models import hidden_progress_bars, load_default_model
from ladref.results import DecodeResult, DecodeStats


def test_loading_is_quiet_unless_progress_is_asked_for():
    assert inspect.signature(load_default_model).parameters["progress"].default is False


def test_progress_bars_are_hidden_and_everything_else_kept(capsys):
    tqdm = pytest.importorskip("tqdm")
    before = sys.stderr
    with hidden_progress_bars():
        for _ in tqdm.tqdm(range(300), desc="Loading weights"):
            pass
        print("loader.py:1: UserWarning: a real warning", file=sys.stderr)
        print("a log line", file=sys.stderr)
    assert sys.stderr is before  # nothing outlives the block
    err = capsys.readouterr().err
    assert "a real warning" in err and "a log line" in err
    assert "Loading weights" not in err and "it/s" not in err


def test_a_result_prints_as_one_readable_line():
    stats = DecodeStats(wall_time_s=4.739015158000029)
    for accepted in (3, 1, 2, 2):
        stats.record(accepted, 24)
    text = "def reverse(xs):\n    return xs[::-1]\n" * 5
    result = DecodeResult(list(range(100, 108)), text, stats, "lookahead")
    line = str(result)
    assert "\n" not in line and len(line) < 200
    assert line.startswith("lookahead: 8 new tokens in 4 steps (S = 2.00), 1.7 tokens/s, 4.74 s | 'def reverse(xs):\\n")
    assert "4.739015" not in line and "100, 101" not in line  # rounded, no id dump
    assert repr(result) == f"DecodeResult({line})"
    assert "ids [100, 101" in str(DecodeResult(list(range(100, 120)), None, stats, "greedy"))
