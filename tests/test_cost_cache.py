"""Where measured cost curves are kept (`ladref.pricing.cost_cache.CostCache`): a cache passed in is used, a file
is written, a second decoder measures nothing, and a broken file never stops a decode.

Every check counts forward passes, never time: a decode spends one pass per step and, in the engine's
own cache, one caching the prompt (over a static runner the prompt runs in the first step's pass), so
any pass beyond those is a measurement.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from strategies import tiny_model
from test_cost import count_passes

from ladref import CompiledAdaptiveDecoder
from ladref.fast.adaptive import AdaptiveDecoder, adaptive_decode
from ladref.pricing.cost_cache import CostCache, default_cache_path

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2]
ROOT = Path(__file__).resolve().parents[1]


def passes_beyond_decoding(decode, prompt_passes: int = 1) -> int:
    """Forward passes `decode()` spent besides the prompt's (`prompt_passes`: 0 where the prompt runs in
    the first step's pass) and its steps: 0 when it measured nothing."""
    shapes, handle = count_passes(tiny_model("llama", 16, 0))
    try:
        result = decode()
    finally:
        handle.remove()
    return len(shapes) - prompt_passes - result.stats.steps


def test_an_empty_cache_passed_in_keeps_the_curve_and_a_second_call_measures_nothing():
    model, cache = tiny_model("llama", 16, 0), CostCache()
    assert passes_beyond_decoding(lambda: adaptive_decode(model, PROMPT, 12, cache=cache, eos_token_id=[])) > 0
    assert len(cache) == 1  # the caller's object holds the curve, not a copy it never sees
    assert passes_beyond_decoding(lambda: adaptive_decode(model, PROMPT, 12, cache=cache, eos_token_id=[])) == 0


def test_a_cache_on_a_new_path_writes_its_file_and_a_later_reader_measures_nothing(tmp_path):
    model, path = tiny_model("llama", 16, 0), tmp_path / "new" / "costs.json"
    AdaptiveDecoder(model, cache=CostCache(path))(PROMPT, 4, eos_token_id=[])  # the first call measures
    assert path.is_file() and len(CostCache(path)) == 1
    assert passes_beyond_decoding(lambda: AdaptiveDecoder(model, cache=CostCache(path))(PROMPT, 12, eos_token_id=[])) == 0


def test_the_compiled_adaptive_decoder_writes_its_curves_to_the_cache_file(tmp_path):
    """Its warm-up prepares every width (a few passes at an empty cache) and measures each cache
    length's curve, unless the file holds it: then the warm-up spends only the preparing passes."""
    model, path = tiny_model("llama", 16, 0), tmp_path / "compiled.json"
    spent = []  # the passes of each warm-up
    for _ in range(2):
        decoder = CompiledAdaptiveDecoder(model, max_lengths=(48, 96), widths=(1, 4), mode=None, cache=CostCache(path))
        shapes, handle = count_passes(model)
        try:
            decoder.warmup()
        finally:
            handle.remove()
        spent.append(shapes)
        assert len(CostCache(path)) == 2  # one curve per static cache length
    per_curve = 1 + (1 + 5) * 2  # a prefill, then an untimed pass and 5 timed ones at each of the 2 widths
    assert len(spent[0]) - len(spent[1]) == 2 * per_curve  # the second warm-up measured nothing
    assert passes_beyond_decoding(lambda: decoder(PROMPT, 12, eos_token_id=[]), prompt_passes=0) == 0  # deferred: in step 1's pass


def test_by_default_only_the_first_call_on_a_machine_measures(user_cache_folder):
    model = tiny_model("llama", 16, 0)
    default_cache_path().unlink(missing_ok=True)
    assert default_cache_path().parent.parent == user_cache_folder  # $XDG_CACHE_HOME/ladref/cost.json
    assert passes_beyond_decoding(lambda: adaptive_decode(model, PROMPT, 12, eos_token_id=[])) > 0
    assert default_cache_path().is_file()
    for _ in range(2):  # a loop of plain calls: nothing measured again
        assert passes_beyond_decoding(lambda: adaptive_decode(model, PROMPT, 12, eos_token_id=[])) == 0
    assert AdaptiveDecoder(model).cost_cache.path == default_cache_path()
    assert AdaptiveDecoder(model, cost=AdaptiveDecoder(model).cost).cost_cache is None  # a curve passed in: no cache read


def test_an_unreadable_default_file_is_reported_and_measured_anew(user_cache_folder):
    model = tiny_model("llama", 16, 0)
    default_cache_path().parent.mkdir(parents=True, exist_ok=True)
    default_cache_path().write_text('{"format": "ladref.cost/1 cache", "models": {"a key": {"trunc')  # a killed write
    with pytest.warns(UserWarning, match="not a ladref.cost/1 cache file.*measured again"):
        result = adaptive_decode(model, PROMPT, 12, eos_token_id=[])
    assert len(result.token_ids) == 12
    assert json.loads(default_cache_path().read_text())["format"] == "ladref.cost/1 cache"  # rewritten whole
    assert len(CostCache.default()) == 1


def test_a_file_that_cannot_be_written_is_reported_and_the_decode_runs(tmp_path):
    (tmp_path / "a_file").write_text("")
    model, path = tiny_model("llama", 16, 0), tmp_path / "a_file" / "costs.json"  # its folder cannot be made
    with pytest.warns(UserWarning, match="could not write the measured cost curve.*kept in memory"):
        cache = CostCache(path)
        result = adaptive_decode(model, PROMPT, 12, cache=cache, eos_token_id=[])
    assert len(result.token_ids) == 12 and len(cache) == 1 and not path.exists()


def test_two_caches_on_one_file_keep_each_others_curves(tmp_path):
    """Two processes (here two objects that read the file before either wrote) both add their curve."""
    path = tmp_path / "shared.json"
    first, second = CostCache(path), CostCache(path)
    first.get(tiny_model("llama", 16, 0), widths=(1, 2), kv_lengths=(6,), repeats=1)
    second.get(tiny_model("llama", 24, 0), widths=(1, 2), kv_lengths=(6,), repeats=1)
    assert len(CostCache(path)) == 2
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, renamed into place


def test_bad_cache_arguments_are_refused_clearly(tmp_path):
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match="is a folder"):
        CostCache(tmp_path)
    (tmp_path / "notes.json").write_text("not json at all")
    with pytest.raises(ValueError, match="notes.json is not a ladref.cost/1 cache file"):
        CostCache(tmp_path / "notes.json")
    with pytest.raises(TypeError, match="cache must be a ladref.pricing.cost_cache.CostCache, got str"):
        adaptive_decode(model, PROMPT, 4, cache=str(tmp_path / "costs.json"))
    with pytest.raises(TypeError, match="cache must be a ladref.pricing.cost_cache.CostCache, got dict"):
        CompiledAdaptiveDecoder(model, max_lengths=64, widths=(1, 4), mode=None, cache={})
    assert bool(CostCache()) and len(CostCache()) == 0  # empty, and still a cache


def test_no_parameter_that_defaults_to_none_is_replaced_by_or():
    """`x or default` replaces an x that is empty (a cache, a tree, a pool, a list) or a tensor (an
    error) as if it were None: the library tests ``is None`` instead."""
    offenders = []
    for path in sorted((ROOT / "ladref").rglob("*.py")):
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = func.args
            positional = args.posonlyargs + args.args
            nones = {a.arg for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults)
                     if isinstance(d, ast.Constant) and d.value is None}
            nones |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if isinstance(d, ast.Constant) and d.value is None}
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(func)
                          if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
                          and isinstance(node.values[0], ast.Name) and node.values[0].id in nones]
    assert not offenders
