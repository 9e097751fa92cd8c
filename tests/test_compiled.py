"""The constant-shape, static-cache decoder (ladref.fast.compiled) against greedy decoding and generate.

Eager constant-shape steps (``mode=None``) carry the property tests (float64, exact); one slow
test compiles the step with torch.compile on the CPU (float32); CUDA graphs run only on a GPU.
"""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    architectures,
    build_tiny,
    hf_greedy,
    lookahead_configs,
    prompts,
    seeds,
    tiny_model,
    vocab_sizes,
)

from ladref import CompiledDecoder, LookaheadConfig, greedy_decode, lookahead_decode
from ladref.hf_internals import guard_static_cache
from ladref.runner import ModelRunner
from ladref.sources.lookahead import LookaheadProposer
from ladref.proposer import merged_tree
from ladref.results import DecodeStats
from ladref.step import draft_step
from ladref.pricing.compiling import compile_scope
from ladref.fast.compiled_adaptive import CompiledAdaptiveDecoder
from ladref.pricing.cost_cache import CostCache
from ladref.fast.static import StaticRunner, static_step

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


@given(architectures, vocab_sizes, seeds, lookahead_configs(), st.data(), st.integers(1, 30))
def test_constant_shape_decoding_equals_generate(arch, vocab, seed, config, data, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    first, second = data.draw(prompts(vocab)), data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    eos_arg = [] if eos is None else eos
    for decoder in (CompiledDecoder(model, config, max_length=128, mode=None), CompiledDecoder(model, max_length=128, mode=None)):
        for prompt in (first, second):  # one decoder, several calls: nothing carries over
            result = decoder(prompt, max_new_tokens, eos_token_id=eos_arg)
            assert result.token_ids == hf_greedy(model, prompt, max_new_tokens, eos)
            assert max(result.stats.forward_tokens_per_step) <= decoder.step_tokens  # padded to one shape


@pytest.mark.parametrize("config", [LookaheadConfig(4, 4, 4), LookaheadConfig(3, 5, 2), LookaheadConfig(2, 3, 0)])
def test_padded_step_matches_the_unpadded_step(config):
    model, prompt = tiny_model("llama", 16, 0), torch.tensor(PROMPT * 2)
    dynamic = ModelRunner(model)
    static = StaticRunner(model, 96, commit_slots=config.ngram_size, step_width=config.max_step_tokens())
    proposers = [LookaheadProposer(config), LookaheadProposer(config)]
    for proposer in proposers:
        proposer.begin(prompt.tolist())
    currents = [runner.prefill(prompt, DecodeStats()) for runner in (dynamic, static)]
    context = prompt.tolist()
    for _ in range(6):  # same accepted tokens, same window, same pool, steps after steps
        out = [draft_step(runner, current, merged_tree([p], context, 16), p.window)
               for runner, p, current in zip((dynamic, static), proposers, currents)]
        for p, outcome in zip(proposers, out):
            p.learn(outcome)
        assert out[0].tokens == out[1].tokens
        currents = [outcome.tokens[-1] for outcome in out]
        context += out[0].tokens
        assert torch.equal(proposers[0].window.grid, proposers[1].window.grid)
    length = dynamic.past_len
    assert static.past_len == length
    for dyn, stat in zip(dynamic.cache.layers, static.cache.layers):  # the committed K/V are the same
        torch.testing.assert_close(stat.keys[..., :length, :], dyn.keys, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(stat.values[..., :length, :], dyn.values, rtol=1e-9, atol=1e-9)
        assert int(stat.cumulative_length) == length


def test_bad_arguments_are_refused():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(ValueError, match="unknown compile mode .max-autotune-plus."):
        CompiledDecoder(model, max_length=64, mode="max-autotune-plus")
    with pytest.raises(TypeError, match="config must be a LookaheadConfig or None"):
        CompiledDecoder(model, (4, 4, 4), max_length=64)
    with pytest.raises(ValueError, match="max_length must be >= 2"):
        CompiledDecoder(model, max_length=0)
    decoder = CompiledDecoder(model, LookaheadConfig(4, 4, 4), max_length=40, mode=None)
    with pytest.raises(ValueError, match="exceeds this decoder's max_length 40"):
        decoder(PROMPT, 20)
    with pytest.raises(ValueError, match="attention_backend"):
        CompiledDecoder(model, max_length=64, attention_backend="efficient")  # no CPU kernel


def _graph_count() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["stats"].values()) if "stats" in counters else 0


@pytest.mark.slow
def test_torch_compile_on_cpu_is_exact_and_compiles_once():
    torch._dynamo.reset()
    model = build_tiny("llama", 16, 1).float()  # float32: the compiled kernels must reproduce greedy
    expected = [greedy_decode(model, p, 24, eos_token_id=[]).token_ids for p in (PROMPT, [5, 4, 6, 5, 4])]
    config = LookaheadConfig(3, 3, 3)
    for decoder in (CompiledDecoder(model, config, max_length=64, mode="default"), CompiledDecoder(model, max_length=64, mode="default")):
        before = _graph_count()
        assert decoder.warmup() > 0 and decoder.capture_s == decoder.warmup()  # measured once
        compiled = _graph_count()
        assert compiled > before  # warmup compiled the step
        results = [decoder(p, 24, eos_token_id=[]) for p in (PROMPT, [5, 4, 6, 5, 4])]
        assert [r.token_ids for r in results] == expected
        assert _graph_count() == compiled, "a decoding call recompiled the step"
    eager = lookahead_decode(model, PROMPT, 24, config=config, eos_token_id=[])
    assert eager.token_ids == expected[0]


@pytest.mark.slow
@pytest.mark.parametrize("config", [None, LookaheadConfig(3, 3, 3)])
def test_frozen_max_autotune_decoders_of_one_shape_keep_their_own_cache(config):
    """Regression: under freezing, a compiled step holds its cache's buffers as graph constants.

    Two decoders of the same shapes once shared the first one's frozen graph: the second read and
    wrote the first one's cache (tokens different from greedy's), then wrote past its end
    ("index out of bounds" inside the generated kernel).
    """
    torch._dynamo.reset()
    model = build_tiny("llama", 16, 1).float()
    prompts = (PROMPT, [5, 4, 6, 5, 4], [7, 3, 3, 9])
    expected = [greedy_decode(model, p, 24, eos_token_id=[]).token_ids for p in prompts]
    first, second = (CompiledDecoder(model, config, max_length=64, mode="max-autotune") for _ in range(2))
    assert first(prompts[0], 24, eos_token_id=[]).token_ids == expected[0]
    kept = [(layer.keys.clone(), int(layer.cumulative_length)) for layer in first.runner.cache.layers]
    for prompt, tokens in zip(prompts[1:], expected[1:]):
        assert second(prompt, 24, eos_token_id=[]).token_ids == tokens
    for (keys, length), layer in zip(kept, first.runner.cache.layers):  # the second decoder left it alone
        assert torch.equal(keys, layer.keys) and int(layer.cumulative_length) == length
    assert first(prompts[2], 24, eos_token_id=[]).token_ids == expected[2]


@pytest.mark.slow
def test_a_frozen_graph_is_not_reused_for_another_cache():
    """`guard_static_cache`: one compiled step run on two runners' caches writes each into its own."""
    torch._dynamo.reset()
    model = build_tiny("llama", 16, 1).float()
    runners = [StaticRunner(model, 32) for _ in range(2)]
    for runner, prompt in zip(runners, (PROMPT, [5, 4, 6, 5, 4])):
        runner.prefill(torch.tensor(prompt), DecodeStats())
    step = torch.compile(static_step, fullgraph=True)  # one code object for both runners
    args = (torch.tensor([3]), torch.tensor([9]), torch.ones(1, 1, dtype=torch.bool), torch.tensor(9), torch.arange(32))
    with compile_scope("max-autotune"), torch.inference_mode():
        for runner in runners:
            guard_static_cache(runner.cache)
        outputs = []
        for runner in runners:
            before = [layer.keys.clone() for layer in runners[0].cache.layers]
            outputs.append(step(runner, *args))
            changed = [not torch.equal(b, layer.keys) for b, layer in zip(before, runners[0].cache.layers)]
            assert all(changed) == (runner is runners[0])  # only the runner's own cache was written
        eager = [static_step(runner, *args) for runner in runners]
    for out, ref in zip(outputs, eager):
        torch.testing.assert_close(out, ref)


@pytest.mark.slow
@pytest.mark.parametrize("config", [None, LookaheadConfig(3, 3, 3)])
def test_packaged_steps_are_built_once_then_loaded_and_stay_exact(config, tmp_path):
    """compile_dir: the first decoder builds its step's AOTInductor package; a second one, as a
    later process would, loads it instead of compiling, bound to its own cache; both are exact."""
    model = build_tiny("llama", 16, 1).float()
    prompts = (PROMPT, [5, 4, 6, 5, 4])
    expected = [greedy_decode(model, p, 24, eos_token_id=[]).token_ids for p in prompts]
    first = CompiledDecoder(model, config, max_length=64, mode="max-autotune", compile_dir=tmp_path)
    first.warmup()
    built = sorted(tmp_path.iterdir())
    assert first.runner.from_disk == {first.step_tokens: False} and [p.suffix for p in built] == [".lock", ".pt2"]
    second = CompiledDecoder(model, config, max_length=64, mode="max-autotune", compile_dir=tmp_path)
    second.warmup()
    assert second.runner.from_disk == {second.step_tokens: True} and sorted(tmp_path.iterdir()) == built
    for decoder in (first, second, first):  # each package instance writes its own runner's cache
        assert [decoder(p, 24, eos_token_id=[]).token_ids for p in prompts] == expected


def test_package_names_and_bad_compile_dirs(tmp_path):
    from ladref.fast.package_record import package_name, weights_digest

    model, other = build_tiny("llama", 16, 1), build_tiny("llama", 16, 2)
    assert weights_digest(model) == weights_digest(build_tiny("llama", 16, 1)) != weights_digest(other)
    runner = StaticRunner(model, 64, compile_mode="max-autotune", widths=(1, 4), compile_dir=tmp_path)
    longer = StaticRunner(model, 96, compile_mode="max-autotune", widths=(1, 4), compile_dir=tmp_path)
    names = {package_name(r, d) for r in (runner, longer) for d in ("weights", "others")}
    assert len(names) == 4 and all(n.startswith("step-w1-4-") for n in names)  # one package for both widths
    one = StaticRunner(model, 64, compile_mode="max-autotune", step_width=4, compile_dir=tmp_path)
    assert package_name(one, "weights").startswith("step-w4-") and package_name(one, "weights") not in names
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(64, 96), widths=(1, 4), mode="max-autotune", compile_dir=tmp_path)
    assert [r.compile_dir for r in decoder.runners] == [tmp_path, tmp_path] and list(tmp_path.iterdir()) == []
    assert [r.weights for r in decoder.runners] == [weights_digest(model)] * 2  # hashed once for both packages
    assert runner.weights is None  # a runner alone hashes at its first package lookup
    with pytest.raises(ValueError, match="compile_mode must be one of .'max-autotune', 'default'., got None"):
        StaticRunner(model, 64, compile_mode=None, compile_dir=tmp_path)
    with pytest.raises(TypeError, match="compile_dir must be a path"):
        CompiledDecoder(model, max_length=64, mode="max-autotune", compile_dir=3)
    with pytest.raises(TypeError, match="weights must be the model's weights_digest"):
        StaticRunner(model, 64, compile_mode="max-autotune", compile_dir=tmp_path, weights=b"digest")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graphs_replay_every_compiled_decoder():
    from torch._dynamo.utils import counters

    model = build_tiny("llama", 16, 1).float().cuda()
    expected = greedy_decode(model, PROMPT, 24, eos_token_id=[]).token_ids
    counters.clear()
    for config in (None, LookaheadConfig(3, 3, 3)):
        decoder = CompiledDecoder(model, config, max_length=64, mode="reduce-overhead")
        assert decoder(PROMPT, 24, eos_token_id=[]).token_ids == expected
        assert decoder.runner.blocks is None  # a GPU's cache stays one buffer per layer (ladref.fast.static)
    adaptive = CompiledAdaptiveDecoder(model, max_lengths=64, widths=(1, 4), mode="reduce-overhead", cache=CostCache())
    assert adaptive(PROMPT, 24, eos_token_id=[]).token_ids == expected  # its cost curve measured through the graphs
    assert counters["inductor"]["cudagraph_skips"] == 0  # every step replayed as a CUDA graph, none run eagerly


def test_a_reset_sets_length_counters_made_in_inference_mode():
    """On a GPU a static layer's length counter is moved to the device inside the first forward,
    under inference mode; a reset outside it (a cost measurement's, before any decoding) still sets it."""
    runner = StaticRunner(tiny_model("llama"), 24, widths=(1, 4))
    runner.prefill(torch.tensor(PROMPT), DecodeStats())
    runner.forward(torch.tensor([4, 5]))
    with torch.inference_mode():  # what lazy_initialization's `.to(device)` leaves on a GPU
        for layer in runner.cache.layers:
            layer.cumulative_length = layer.cumulative_length.clone()
    runner.blocks = None
    runner.empty()
    assert runner.length == 0 and all(int(layer.cumulative_length) == 0 for layer in runner.cache.layers)


def test_the_static_cache_is_packed_by_its_first_forward_and_a_commit_moves_every_layer():
    """After its first forward a runner's cache is three blocks, each layer's buffers views of its slice
    (`pack_static_cache`); a commit gathers the accepted slots of every layer at once, as a
    layer-by-layer gather would, and sets every layer's length."""
    from ladref.hf_internals import pack_static_cache

    runner = StaticRunner(tiny_model("llama"), 24)
    runner.prefill(torch.tensor(PROMPT), DecodeStats())
    keys, values, lengths = runner.blocks
    for i, layer in enumerate(runner.cache.layers):
        assert layer.keys.data_ptr() == keys[i].data_ptr() and layer.values.data_ptr() == values[i].data_ptr()
        assert layer.keys.is_contiguous() and int(layer.cumulative_length) == len(PROMPT) - 1
    runner.forward(torch.tensor([4, 5, 6]))
    expected = [(layer.keys.clone(), layer.values.clone()) for layer in runner.cache.layers]
    past, accepted = len(PROMPT) - 1, torch.tensor([0, 2])
    for k, v in expected:  # the same commit, layer by layer, on copies
        for buffer in (k, v):
            buffer.index_copy_(2, past + torch.arange(2), buffer.index_select(2, past + accepted))
    runner.commit(past, accepted)
    for layer, (k, v) in zip(runner.cache.layers, expected):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v) and int(layer.cumulative_length) == past + 2
    assert runner.length == past + 2
    runner.blocks = None  # as for a cache pack_static_cache leaves alone: the commit goes layer by layer
    runner.forward(torch.tensor([7, 8]))
    kept = [layer.keys[:, :, past + 3].clone() for layer in runner.cache.layers]  # the second new token's keys
    runner.commit(past + 2, torch.tensor([1]))
    for layer, k in zip(runner.cache.layers, kept):
        assert torch.equal(layer.keys[:, :, past + 2], k) and int(layer.cumulative_length) == past + 3
    odd = types.SimpleNamespace(layers=[types.SimpleNamespace(keys=torch.zeros(1, 2, 8, 4), values=torch.zeros(1, 2, 8, 4)),
                                        types.SimpleNamespace(keys=torch.zeros(1, 2, 4, 4), values=torch.zeros(1, 2, 4, 4))])
    assert pack_static_cache(odd) is None and odd.layers[1].keys.shape == (1, 2, 4, 4)  # a sliding-window layer: left as it is
