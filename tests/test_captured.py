"""The whole batched step captured as one program (`ladref.batched.captured.CapturedBatchDecoder`).

Float64 tiny models: every row must equal its batch-1 greedy output exactly, with EOS and budget
cuts inside a run of steps and the static cache's slots packed when they run short. The property
tests run the program uncompiled (mode None: the same function, every shape fixed); the compiled
tests compile it whole (``fullgraph=True``: a graph break fails them) and count what the host does
between steps.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, seeds, tiny_model, vocab_sizes

from ladref.pricing.cost import CostModel
from ladref.batched.program import BARE, program_cost
from ladref.pricing.surface import CostSurface
from ladref import (CapturedBatchDecoder, JacobiProposer, LookaheadConfig, LookaheadProposer, PromptLookupProposer,
                    RecyclingProposer, SuffixMemory, SuffixProposer, greedy_decode)

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCES = {  # the proposers of each captured decoder, for a vocabulary of V
    "greedy": lambda vocab: [],
    "jacobi": lambda vocab: [JacobiProposer(3)],
    "prompt_lookup": lambda vocab: [PromptLookupProposer(4)],
    "lookahead": lambda vocab: [LookaheadProposer(LookaheadConfig(3, 3, 2))],
    "recycling": lambda vocab: [RecyclingProposer(vocab)],
    "lookahead+lookup": lambda vocab: [LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3)],
    "lookup+memory": lambda vocab: [PromptLookupProposer(3, memory=SuffixMemory(24))],  # each call's outputs drafted by the next
}


def greedy(model, batch, budgets, eos=()):
    return [greedy_decode(model, p, b, eos_token_id=list(eos)).token_ids for p, b in zip(batch, budgets)]


def tight(model, proposers, batch, budgets, **kwargs) -> CapturedBatchDecoder:
    """A decoder whose cache holds exactly the longest prompt + the largest budget + one step (Q learned
    from a roomy decoder's call): the slots run short whenever the rows keep unequal counts."""
    roomy = CapturedBatchDecoder(model, proposers, max_length=512, mode=None)
    roomy([batch[0]], 1)
    need = max(len(p) for p in batch) + max(budgets) + roomy.step_width
    return CapturedBatchDecoder(model, proposers, max_length=need, **{"mode": None, **kwargs})


@pytest.mark.parametrize("name", SOURCES)
@settings(max_examples=6, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_a_captured_batch_equals_greedy_row_by_row(name, arch, vocab, seed, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))  # budget cuts inside a run
    eos = data.draw(st.sampled_from([[], [data.draw(st.integers(0, vocab - 1))]]))  # EOS cuts inside a run
    every = data.draw(st.integers(1, 5))
    decoder = tight(model, SOURCES[name](vocab), batch, budgets, steps_per_read=every)
    result = decoder(batch, budgets, eos_token_id=eos)
    assert result.token_ids == greedy(model, batch, budgets, eos)
    assert decoder(batch, budgets, eos_token_id=eos).token_ids == result.token_ids  # a second call: the same buffers, reset


COSTS = {  # synthetic t(q) / t(1): drafting free, dear, and in between
    "flat": {1: 1.0, 128: 1.001},
    "steep": {1: 1.0, 2: 40.0, 128: 5000.0},
    "ridge": {1: 1.0, 4: 1.05, 8: 1.2, 16: 1.6, 32: 2.5, 128: 9.0},
}


def adaptive(model, batch, budgets, cost, widths=None, **kwargs) -> CapturedBatchDecoder:
    return tight(model, SOURCES["lookahead+lookup"](model.config.vocab_size), batch, budgets,
                 cost=CostSurface.of(CostModel.from_ratios(COSTS[cost])), widths=widths, **kwargs)


@settings(max_examples=8, deadline=None)
@given(architectures, vocab_sizes, seeds, st.sampled_from(sorted(COSTS)), st.data())
def test_a_captured_adaptive_batch_equals_greedy_row_by_row(arch, vocab, seed, cost, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))
    eos = data.draw(st.sampled_from([[], [data.draw(st.integers(0, vocab - 1))]]))
    widths = data.draw(st.lists(st.integers(0, 8), min_size=1, max_size=3))  # the captured node counts
    decoder = adaptive(model, batch, budgets, cost, widths, steps_per_read=data.draw(st.integers(1, 4)))
    assert decoder(batch, budgets, eos_token_id=eos).token_ids == greedy(model, batch, budgets, eos)
    for shape in decoder.shapes:  # a captured width, every node (the first step, or wished beyond them all), or bare
        assert shape[0] in widths or shape[0] == decoder.draft_width or shape == BARE
    if cost == "steep":  # no draft can pay: after the first step, every run bare (nothing proposed)
        assert set(decoder.shapes) <= {BARE, (decoder.draft_width, True)} and decoder.shapes[BARE] >= sum(decoder.shapes.values()) - 1


def test_a_captured_adaptive_batch_drafts_only_where_the_surface_makes_it_pay():
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2, 3, 1, 2, 3], [4, 5, 4, 5, 4, 5]], [24, 24]
    fed = {}
    for cost in ("flat", "steep"):
        result = adaptive(model, batch, budgets, cost, steps_per_read=2)(batch, budgets, eos_token_id=[])
        assert result.token_ids == greedy(model, batch, budgets)
        fed[cost] = [sum(r.stats.forward_tokens_per_step) / r.stats.steps for r in result]
        assert result.rows[0].method == "captured_adaptive"
    assert all(f == 1.0 for f in fed["steep"])  # every extra token dearer than it can pay: the current token alone
    assert all(f > 2.0 for f in fed["flat"])  # free: the window and the drafts


def test_a_program_cost_prices_every_step_at_the_cheapest_program_that_can_run_it():
    times = {(0, False): 1.0, (2, False): 1.5, (8, False): 2.0, (0, True): 3.0, (8, True): 2.5}  # a window of 10 cells
    surface = program_cost(times, 10)
    #        q: 1    2    3    4 ... 9      10 ... 19: the 0-node window program (q = 11) dearer than the 8-node one (q = 19)
    assert surface.at(1).curve(1024) == [1.0, 1.5, 1.5] + [2.0] * 6 + [2.5] * 10
    assert program_cost({(4, False): 2.0}, 0).at(1).curve(1024) == [2.0] * 5  # nothing narrower: its price from q = 1
    with pytest.raises(ValueError, match="at least one program"):
        program_cost({}, 3)


def test_measure_times_the_decoders_own_programs_and_prices_its_steps_with_them():
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5]], [12, 12]
    decoder = adaptive(model, batch, budgets, "flat", widths=(0, 2), steps_per_read=1)
    surface = decoder.measure(batch, 4)
    curve = surface.at(2).curve(1024)
    assert len(curve) == decoder.step_width and surface.label == "captured programs (6)"  # 0, 2 and every node, window or not
    assert all(t > 0 for t in curve) and curve == sorted(curve)  # a staircase
    decoder.cost = surface
    assert decoder(batch, budgets, eos_token_id=[]).token_ids == greedy(model, batch, budgets)
    with pytest.raises(ValueError, match="make the decoder with cost"):
        CapturedBatchDecoder(model, SOURCES["lookahead"](16), max_length=64, mode=None).measure(batch)


def test_a_memory_of_outputs_grows_by_each_call_and_not_by_capture_or_measure():
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5]], [12, 10]
    memory = SuffixMemory(64)
    decoder = CapturedBatchDecoder(model, [LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3, memory=memory)],
                                   max_length=128, mode=None, cost=CostSurface.of(CostModel.from_ratios(COSTS["flat"])), widths=(2,))
    decoder.capture(batch)
    assert isinstance(decoder.measure(batch, 4), CostSurface)  # (the calls below keep the flat surface: a timed one varies)
    assert memory.records == {}  # practice calls: nothing remembered
    first = decoder(batch, budgets, eos_token_id=[])
    assert [text for text, _ in memory.records.values()] == first.token_ids == greedy(model, batch, budgets)
    again = decoder(batch, budgets, eos_token_id=[])  # now drafting from the first call's outputs too
    assert again.token_ids == first.token_ids and len(memory.records) == 4
    lookup = [sum(k * n for k, n in row.stats.accepted_by_source.get("prompt_lookup", {}).items()) for row in (*first, *again)]
    assert sum(lookup[2:]) > sum(lookup[:2])  # the same prompts again: the memory holds their outputs


def test_a_draft_budget_narrows_every_step_and_keeps_greedy():
    model = tiny_model("gpt2", 16, 2)
    batch, budgets = [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5], [6]], [18, 12, 15]
    proposers = SOURCES["lookahead+lookup"](16)
    full, narrow = (CapturedBatchDecoder(model, proposers, max_length=128, mode=None, draft_budget=b) for b in (None, 2))
    assert full(batch, budgets).token_ids == narrow(batch, budgets).token_ids == greedy(model, batch, budgets)
    assert narrow.step_width == 4 + 2 < full.step_width  # the window's (N-1) W = 4 cells, then 2 nodes
    with pytest.raises(ValueError, match="draft_budget"):
        CapturedBatchDecoder(model, proposers, max_length=128, draft_budget=0)


def test_the_slots_are_packed_when_they_run_short_and_nothing_changes():
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2], [4, 5, 4, 5, 4], [7, 7, 3], [2]], [30, 24, 30, 18]
    decoder = tight(model, SOURCES["lookahead+lookup"](16), batch, budgets, steps_per_read=3)
    result = decoder(batch, budgets)
    assert decoder.compactions > 0  # ragged acceptance left holes that the tight cache had to reclaim
    assert result.token_ids == greedy(model, batch, budgets)


def test_a_row_of_a_captured_batch_has_its_one_prompt_statistics():
    model = tiny_model("qwen2", 16, 1)
    batch, budgets = [[1, 2, 3, 1, 2, 3], [5, 5, 5]], [16, 12]
    result = CapturedBatchDecoder(model, SOURCES["lookahead+lookup"](16), max_length=256, mode=None)(batch, budgets)
    for row, tokens in zip(result, greedy(model, batch, budgets)):
        assert row.token_ids == tokens
        assert sum(row.stats.accepted_per_step) == len(tokens) == row.stats.new_tokens
        assert set(row.stats.accepted_by_source) <= {"lookahead", "prompt_lookup"}
    assert result.passes >= max(r.stats.steps for r in result)


def host_reads(call) -> tuple[int, int, Counter]:
    """(tolist/item calls, aten::_local_scalar_dense, the aten ops outside any compiled region) of `call`, under torch.profiler."""
    calls = [0]

    def count(frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") in ("tolist", "item"):
            calls[0] += 1

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        sys.setprofile(count)
        try:
            call()
        finally:
            sys.setprofile(None)
    outside = Counter()
    for event in prof.events():
        parent, inside = event.cpu_parent, False
        while parent is not None and not inside:
            inside = "Compiled" in parent.name or "compiled" in parent.name or parent.name.startswith("aten::")
            parent = parent.cpu_parent
        if event.name.startswith("aten::") and not inside:
            outside[event.name] += 1
    scalars = sum(e.name == "aten::_local_scalar_dense" for e in prof.events())
    return calls[0], scalars, outside


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 16])
def test_a_compiled_captured_step_reads_once_a_run_and_runs_one_graph(rows):
    torch._dynamo.reset()
    model = tiny_model("llama", 16, 0)
    batch = [[1, 2, 3, 1, 2], [4, 5, 4, 5, 4], [7, 7, 3], [2, 9, 2, 9]] * 4
    batch = batch[:rows]
    remembering = [LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3, memory=SuffixMemory(64))]
    decoder = CapturedBatchDecoder(model, remembering, max_length=200, mode="default", steps_per_read=4)
    short, long = [6] * rows, [60] * rows  # the memory grows at every call: its (C,) corpus keeps the program's shape
    with torch._dynamo.config.patch(error_on_recompile=True):
        decoder(batch, short)  # compiles: one graph (fullgraph), and never again for this batch size: its
        # state is kept at guarded static addresses (`resident`), so a step or call that replaced a tensor would recompile
        assert decoder(batch, long).token_ids == greedy(model, batch, long)
        for eos in ([], [3, 5, 7]):  # another eos set, another size: the same program (`BatchState.eos` is padded)
            assert decoder(batch, long, eos_token_id=eos).token_ids == greedy(model, batch, long, eos)
        (calls_a, scalars_a, ops_a), (calls_b, scalars_b, ops_b) = host_reads(lambda: decoder(batch, short)), \
            host_reads(lambda: decoder(batch, long))
    steps = decoder(batch, long).passes - decoder(batch, short).passes
    assert steps >= 8
    assert scalars_b == scalars_a  # the steps read nothing: the captured program no scalar, ...
    assert calls_b - calls_a <= -(-steps // 4) + 1  # ... the loop one tensor every 4 steps
    extra = sum(ops_b.values()) - sum(ops_a.values())
    print(f"B={rows}: {steps} steps, reads {calls_b - calls_a}, scalar reads {scalars_b - scalars_a}, ops outside {extra}: {ops_b - ops_a}")
    assert extra <= 4 * steps  # outside the program: the step log's row and the read, a few ops a step


@pytest.mark.slow
def test_compiled_captured_adaptive_runs_its_captured_widths_and_reads_once_a_step():
    torch._dynamo.reset()
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5, 4], [7, 7, 3], [2, 9, 2, 9]], [40] * 4
    decoder = CapturedBatchDecoder(model, SOURCES["lookahead+lookup"](16), max_length=200, mode="default", steps_per_read=1,
                                   cost=CostSurface.of(CostModel.from_ratios(COSTS["ridge"])), widths=(2,))  # roomy: no compaction
    graphs = torch._dynamo.utils.counters["stats"]
    before = graphs["unique_graphs"]  # (the counters outlive a reset: other tests' graphs are counted too)
    decoder.capture(batch)  # every program of this batch size: 2 nodes and every node, each with and without the window, and bare
    compiled = graphs["unique_graphs"]
    assert compiled - before == 2 * 2 + 1
    with torch._dynamo.config.patch(error_on_recompile=True):  # the policy's tensors too kept in place (`resident`)
        result = decoder(batch, budgets, eos_token_id=[])
    assert result.token_ids == greedy(model, batch, budgets)
    short = [8] * 4
    (calls_a, scalars_a, _), (calls_b, scalars_b, _) = (host_reads(lambda: decoder(batch, b, eos_token_id=[])) for b in (short, budgets))
    steps = decoder(batch, budgets, eos_token_id=[]).passes - decoder(batch, short, eos_token_id=[]).passes
    assert graphs["unique_graphs"] == compiled  # the same shapes again: nothing compiled
    assert steps >= 8 and scalars_b == scalars_a  # the steps read no scalar ...
    assert calls_b - calls_a <= steps  # ... and the loop one tensor a step: the stop flags and the policy's width
    decoder.cost = CostSurface.of(CostModel.from_ratios({1: 1.0, 3: 1.01, 300: 9.0}))  # another surface, another width
    assert decoder(batch, budgets, eos_token_id=[]).token_ids == greedy(model, batch, budgets)
    assert graphs["unique_graphs"] == compiled  # priced on M widths whatever the surface: the same programs
    print(f"{compiled - before} programs, {steps} more steps, {calls_b - calls_a} more reads")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_captured_steps_replay_as_cuda_graphs_and_read_once_a_run():
    """Under "reduce-overhead" every compiled step replays a CUDA graph (none skipped: what a step
    mutates is kept at static addresses, `ladref.batched.resident`), call after call."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    model = tiny_model("llama", 16, 0).cuda()
    batch, budgets, short = [[1, 2, 3, 1, 2], [4, 5, 4, 5, 4], [7, 7, 3], [2, 9, 2, 9]], [40] * 4, [8] * 4
    expected = greedy(model, batch, budgets)
    counters.clear()
    for name in ("greedy", "jacobi", "lookahead", "recycling", "lookup+memory"):
        decoder = CapturedBatchDecoder(model, SOURCES[name](16), max_length=200, mode="reduce-overhead", steps_per_read=4)
        for _ in range(2):  # the second call replays the same graphs over the kept tensors, reset in place
            assert decoder(batch, budgets, eos_token_id=[]).token_ids == expected, name
        (calls_a, _, _), (calls_b, _, _) = (host_reads(lambda: decoder(batch, b, eos_token_id=[])) for b in (short, budgets))
        steps = decoder(batch, budgets, eos_token_id=[]).passes - decoder(batch, short, eos_token_id=[]).passes
        assert steps >= 8 and calls_b - calls_a <= -(-steps // 4) + 1, name  # one read every 4 steps
    decoder(batch, budgets, eos_token_id=[], do_sample=True, generator=torch.Generator().manual_seed(0))  # keyed noise, captured
    adaptive = CapturedBatchDecoder(model, SOURCES["lookahead+lookup"](16), max_length=200, mode="reduce-overhead", steps_per_read=1,
                                    cost=CostSurface.of(CostModel.from_ratios(COSTS["ridge"])), widths=(2,))
    adaptive.capture(batch)
    assert adaptive(batch, budgets, eos_token_id=[]).token_ids == expected
    assert counters["inductor"]["cudagraph_skips"] == 0  # every compiled step replayed as a CUDA graph


def test_captured_decoders_refuse_what_they_cannot_capture():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(TypeError, match="SuffixProposer cannot be captured"):
        CapturedBatchDecoder(model, [SuffixProposer()], max_length=64)
    with pytest.raises(ValueError, match="steps_per_read"):
        CapturedBatchDecoder(model, [], max_length=64, steps_per_read=0)
    with pytest.raises(ValueError, match="reduce-overhead"):
        CapturedBatchDecoder(model, [], max_length=64, mode="reduce-overhead")
    decoder = CapturedBatchDecoder(model, SOURCES["lookahead"](16), max_length=24, mode=None)
    with pytest.raises(ValueError, match="exceeds this decoder's max_length 24"):
        decoder([[1, 2, 3]], 16)
    with pytest.raises(ValueError, match="row 1 of the batch"):
        decoder([[1, 2], [99]], 2)
    with pytest.raises(ValueError, match="non-empty list of prompts"):
        decoder([], 2)
    with pytest.raises(ValueError, match="a streamer follows one sequence; decode a batch of 2 rows without one"):
        decoder([[1, 2], [3]], 2, streamer=object())  # one row streams (tests/test_batch_stream.py)
    surface = CostSurface.of(CostModel.from_ratios(COSTS["flat"]))
    with pytest.raises(TypeError, match="cost must be a CostSurface"):
        CapturedBatchDecoder(model, SOURCES["lookahead"](16), max_length=64, cost=CostModel.from_ratios(COSTS["flat"]))
    with pytest.raises(ValueError, match="needs draft sources"):
        CapturedBatchDecoder(model, [], max_length=64, cost=surface)
    with pytest.raises(TypeError, match="widths must be"):
        CapturedBatchDecoder(model, SOURCES["lookahead"](16), max_length=64, cost=surface, widths=4)
    with pytest.raises(ValueError, match="a width must be >= 0"):
        CapturedBatchDecoder(model, SOURCES["lookahead"](16), max_length=64, cost=surface, widths=[2, -1])
