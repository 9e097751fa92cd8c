"""Adaptive decoding: exact output, and the choices a cost curve calls for."""

from __future__ import annotations

import math

import pytest
import torch
from families import SUPPORTED, family_model
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import architectures, hf_greedy, prompts, seeds, tiny_model, vocab_sizes

from ladref import DraftTree, LookaheadConfig, LookaheadProposer, PromptLookupProposer, greedy_decode, lookahead_decode
from ladref.fast.adaptive import AdaptiveDecoder, adaptive_decode
from ladref.pricing.cost import CostModel
from oracle_policy import DraftPolicy, Load

from ladref.pricing.policy import PolicySettings

pytestmark = pytest.mark.usefixtures("one_thread")
FLAT = CostModel.flat(256)  # a launch-bound GPU: any width costs one step
CPU = CostModel.from_ratios({1: 1.0, 2: 2.1, 4: 2.0, 8: 2.2, 16: 2.3, 32: 2.5, 64: 3.7})  # measured on a 2-core CPU
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2]


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 40), st.sampled_from([FLAT, CPU]))
def test_adaptive_output_is_greedy(arch, vocab, seed, data, max_new_tokens, cost):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    result = adaptive_decode(model, prompt, max_new_tokens, cost=cost, window=LookaheadConfig(3, 3, 3),
                             eos_token_id=[] if eos is None else eos)
    assert result.token_ids == hf_greedy(model, prompt, max_new_tokens, eos)
    assert result.method == "adaptive" and result.stats.steps <= max(len(result.token_ids), 1)


@pytest.mark.parametrize("family", SUPPORTED)
def test_every_family_decodes_exactly_greedy(family):
    model = family_model(family, 16, 0)
    for cost in (FLAT, CPU):
        assert adaptive_decode(model, PROMPT, 24, cost=cost).token_ids == hf_greedy(model, PROMPT, 24), family


def test_a_flat_curve_makes_it_choose_the_full_lookahead_step_by_itself():
    model, config = tiny_model("llama", 16, 0), LookaheadConfig(4, 4, 4)
    full = lookahead_decode(model, [1, 2, 3], 40, config=config, eos_token_id=[])
    adaptive = adaptive_decode(model, [1, 2, 3], 40, cost=FLAT, proposers=[LookaheadProposer(config)], eos_token_id=[])
    assert adaptive.token_ids == full.token_ids
    assert adaptive.stats.forward_tokens_per_step == full.stats.forward_tokens_per_step  # window + every candidate, every step
    assert adaptive.stats.accepted_per_step == full.stats.accepted_per_step


def test_a_cpu_curve_makes_it_decode_greedily_until_drafts_pay():
    model = tiny_model("llama", 16, 0)  # its greedy text cycles with period 5: prompt lookup soon pays
    decoder = AdaptiveDecoder(model, cost=CPU, proposers=[PromptLookupProposer()], window=None)
    result = decoder([1, 2, 3], 60, eos_token_id=[])
    fed = result.stats.forward_tokens_per_step
    assert fed[0] == 1  # no evidence yet: a draft of unknown worth does not pay for t(2) = 2.1 t(1)
    assert max(fed) > 1 and result.stats.compression > 2.0  # once drafts are known to be accepted, it feeds them
    learned = decoder.policy.rates()[("prompt_lookup", 3, 1, 0)]  # after a 3-token match (one prompt: the engine's row 0)
    assert learned > 0.8  # checked against every step's tokens, fed or not
    flat = AdaptiveDecoder(model, cost=FLAT, proposers=[PromptLookupProposer()], window=None)([1, 2, 3], 60, eos_token_id=[])
    assert flat.stats.steps <= result.stats.steps and flat.token_ids == result.token_ids


@given(st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=5), min_size=1, max_size=6), st.floats(0.05, 0.95),
       st.floats(0.0, 20.0), st.integers(1, 12), st.sampled_from([None, 6]), st.sampled_from([FLAT, CPU]))
def test_a_closed_gate_means_no_tree_would_have_been_fed(paths, rate, others, floor, cells, cost):
    policy, load = DraftPolicy(cost, settings=PolicySettings(prior=(rate, 1.0))), Load(others, floor)
    choice = policy.choose([DraftTree.from_paths(paths, "s")], 100, cells, None, load)
    if not policy.may_draft(100, cells, load):  # the most hopeful tree would not pay: this one does not either
        assert len(choice.tree) == 0 and not choice.window


BUSY = CostModel.from_ratios({1: 1.0, 2: 1.8, 4: 2.3, 8: 3.3, 16: 5.0, 32: 6.8})  # a pass of 16 rows on 2 cores


@given(st.floats(4.0, 20.0), st.integers(1, 3), st.sampled_from([None, 6]), st.floats(0.0, 3.0))
def test_a_closed_gate_is_what_choose_finds_with_nothing_proposed(others, floor, cells, window_value):
    policy, load = DraftPolicy(BUSY), Load(others, floor)
    policy.window_value = window_value
    assume(not policy.may_draft(100, cells, load))  # the engine then runs a plain step without asking
    choice = policy.choose([], 100, cells, [], load)
    assert len(choice.tree) == 0 and not choice.window and choice.probe is None and choice.own_width == 1


def test_drafts_are_not_proposed_while_none_could_pay():
    class Counted(PromptLookupProposer):
        calls = 0

        def propose(self, context):
            Counted.calls += 1
            return super().propose(context)

    assert not DraftPolicy(BUSY).may_draft(0, None, Load(others=15.0))  # every draft widens 16 rows' pass
    assert DraftPolicy(BUSY).may_draft(0) and DraftPolicy(FLAT).may_draft(0, None, Load(others=15.0))
    model, steep = tiny_model("llama", 16, 0), CostModel.from_ratios({1: 1.0, 2: 50.0, 64: 100.0})
    result = adaptive_decode(model, [1, 2, 3], 30, cost=steep, proposers=[Counted()], eos_token_id=[])
    assert result.token_ids == hf_greedy(model, [1, 2, 3], 30) and Counted.calls == 1  # the first, checked before prefill
    Counted.calls = 0
    drafting = adaptive_decode(model, [1, 2, 3], 30, cost=CPU, proposers=[Counted()], eos_token_id=[])
    assert drafting.token_ids == result.token_ids and Counted.calls == drafting.stats.steps  # proposed before every step


def test_the_policy_learns_from_trees_it_did_not_feed():
    policy = DraftPolicy(CPU)
    tree = DraftTree.from_paths([[5, 6, 7], [5, 8], [9]], "lookup")
    policy.propose([tree])
    policy.observe([5, 6])  # 5 right (9 reached, wrong), then 6 right (8 reached, wrong); node 7 still pending
    assert policy.rates[("lookup", 0, 1, 0)].accepted == 1 + 1 and policy.rates[("lookup", 0, 1, 1)].accepted == 1
    assert policy.rates[("lookup", 0, 2, 0)].reached == 3 + 1 and len(policy.pending) == 1
    policy.observe([4])
    assert policy.rates[("lookup", 0, 3, 0)].accepted == 1 and policy.pending == []
    values = policy.values(tree)
    assert values[0] > values[1] > values[2]  # a child is never worth more than its parent


def test_compiled_widths_bound_and_price_the_steps():
    policy = DraftPolicy(FLAT, widths=(1, 4))
    tree = DraftTree.from_paths([[1, 2, 3, 4, 5, 6, 7, 8]], "s")
    choice = policy.choose([tree], kv=10)
    chosen, window = choice.tree, choice.window
    assert len(chosen) == 3 and not window  # the widest compiled step: 4 tokens
    stepped = DraftPolicy(CPU, widths=(1, 4, 16))
    assert stepped.step_time(5, 10) == stepped.step_time(16, 10) > stepped.step_time(4, 10)  # padded to the next width
    stepped.corrections = {0: 0.3, 4: -0.2}  # learned for the 4-wide bucket, and for all
    for q, bucket in ((1, 1), (2, 4), (4, 4), (5, 16), (16, 16)):
        factor = math.exp(stepped.corrections.get(bucket, 0.3))
        assert stepped.step_time(q, 300) == pytest.approx(CPU.time(bucket, 300) * factor, rel=1e-12)


def test_bad_arguments_are_refused():
    model = tiny_model("llama", 16, 0)
    with pytest.raises(TypeError, match="cost must be a CostModel"):
        adaptive_decode(model, PROMPT, cost={1: 0.1})
    with pytest.raises(ValueError, match="positive, finite"):
        CostModel.from_times({1: 0.1, 2: float("nan")})
    with pytest.raises(ValueError, match="prior"):
        DraftPolicy(CPU, settings=PolicySettings(prior=(2.0, 1.0)))
    with pytest.raises(ValueError, match="width 128 is wider than the cost curve measures .64."):
        DraftPolicy(CPU, widths=(1, 128))
    with pytest.raises(TypeError, match="does not implement the Proposer protocol"):
        adaptive_decode(model, PROMPT, cost=CPU, proposers=[42])


def test_adaptive_decoding_over_a_width_bucketed_static_runner_is_greedy():
    """One `StaticRunner` of a few widths serves every call of the engine; each step is padded to its bucket."""
    from ladref import CompiledAdaptiveDecoder

    model = tiny_model("llama", 16, 0)
    decoder = CompiledAdaptiveDecoder(model, max_lengths=160, widths=(1, 2, 4, 8, 16, 32), mode=None, cost=CPU, keep_learning=True)
    runner, buckets = decoder.runners[0], set()
    for prompt in ([1, 2, 3, 1, 2, 3, 1, 2], [5, 4, 6, 5, 4], [7]):
        result = decoder(prompt, 40, eos_token_id=[])
        assert result.token_ids == hf_greedy(model, prompt, 40)
        buckets |= {runner.width_for(q) for q in result.stats.forward_tokens_per_step}
    assert len(buckets) > 1  # the steps switched widths


@pytest.mark.slow
def test_compiled_width_buckets_serve_adaptive_decoding_exactly():
    """Frozen max-autotune steps, one per width compiled once, switched between without recompiling."""
    from strategies import build_tiny
    from torch._dynamo.utils import counters

    from ladref import CompiledAdaptiveDecoder

    torch._dynamo.reset()
    model = build_tiny("llama", 16, 1).float()
    decoder = CompiledAdaptiveDecoder(model, max_lengths=128, widths=(1, 4), mode="max-autotune", cost=CPU,
                                      keep_learning=True)  # two widths: ~25 s of max-autotune each
    runner = decoder.runners[0]
    assert decoder.warmup() > 0 and sorted(runner.compile_s) == [1, 4]
    graphs = dict(counters["stats"])
    buckets = set()
    for prompt in ([1, 2, 3, 1, 2, 3, 1, 2], [5, 4, 6, 5, 4]):
        result = decoder(prompt, 32, eos_token_id=[])
        assert result.token_ids == hf_greedy(model, prompt, 32)
        buckets |= {runner.width_for(q) for q in result.stats.forward_tokens_per_step}
    assert len(buckets) > 1 and dict(counters["stats"]) == graphs  # widths switched, nothing compiled again


def test_timed_steps_correct_the_curve_when_calibrating():
    tree = DraftTree.from_paths([[1, 2, 3, 4, 5, 6, 7]], "s")
    policy = DraftPolicy(CPU, settings=PolicySettings(calibrate=True))
    for _ in range(3):
        policy.propose([tree])
        policy.observe([1, 2, 3, 4, 5, 6, 7, 8])  # every node right: a draft is worth feeding
    assert len(policy.choose([tree], kv=0).tree) > 1
    policy.timed(8, 0, 2 * CPU.time(8))  # the 8-token steps really cost 2x the curve (e.g. a long prompt)
    assert policy.step_time(8, 0) == pytest.approx(2 * CPU.time(8))
    assert policy.step_time(1, 0) == pytest.approx(2 * CPU.time(1))  # no own timing yet: the correction of all
    policy.timed(1, 0, CPU.time(1))  # a one-token step costs what the curve says
    assert policy.step_time(1, 0) == pytest.approx(CPU.time(1)) and len(policy.choose([tree], kv=0).tree) == 0
    fixed = DraftPolicy(CPU)  # calibrate=False: a curve passed in is taken as it is
    fixed.timed(8, 0, 2 * CPU.time(8))
    assert fixed.step_time(8, 0) == CPU.time(8) and fixed.corrections == {}


def test_acceptance_is_learned_apart_per_grade_of_evidence():
    policy, tree = DraftPolicy(CPU), DraftTree.from_paths([[5]], "prompt_lookup")
    policy.propose([tree], [3])
    policy.observe([5])
    policy.propose([tree], [1])
    policy.observe([6])
    assert policy.rate(("prompt_lookup", 3, 1, 0)) > policy.settings.prior[0] / policy.settings.prior[1] > policy.rate(("prompt_lookup", 1, 1, 0))
    proposer = PromptLookupProposer()
    proposer.begin([1, 2, 3, 9, 1, 2, 3])
    assert len(proposer.propose([1, 2, 3])) and proposer.evidence == 3  # the longest suffix found earlier
    proposer.begin([4, 5, 6])
    assert not len(proposer.propose([4, 5, 6])) and proposer.evidence == 0


def test_sources_that_disagree_cannot_promise_more_than_one_child():
    from oracle_acceptance import exclusive

    tree = DraftTree.from_paths([[1, 2], [3], [4]], "a")  # root children 1, 3, 4; node 2 below 1
    value = torch.tensor([0.8, 0.4, 0.6, 0.6], dtype=torch.float64)  # nodes: 1, 2, 3, 4 (topological)
    fixed = exclusive(tree, value)
    children = [i for i, p in enumerate(tree.parents.tolist()) if p < 0]
    assert float(fixed[children].sum()) == pytest.approx(1.0)  # 0.8 + 0.6 + 0.6 scaled to 1
    node2 = tree.find_path([1, 2])[-1]
    assert float(fixed[node2] / fixed[tree.find_path([1])[-1]]) == pytest.approx(0.5)  # its own rate kept
    assert torch.equal(exclusive(tree, value * 0.3), value * 0.3)  # consistent values stay as they are


def test_probes_scale_down_drafts_that_deliver_less_than_promised():
    settings = PolicySettings(prior=(9.0, 10.0))  # every node believed 90% likely
    policy, tree = DraftPolicy(CPU, settings=settings), DraftTree.from_paths([[1, 2, 3]], "s")

    def choose() -> DraftTree:  # as the engine does: the step's probe is watched, fed or not
        choice = policy.choose([tree], kv=0)
        policy.watch(choice.probe, choice.probe_expected)
        return choice.tree

    assert policy.trust == 1.0 and len(choose()) == 3  # 1 + 2.4 expected tokens for t(4) = 2 t(1)
    for _ in range(10):
        policy.observe([9])  # the draft it would feed is never right: each step's probe finds 0 of about 2.4 tokens
        choose()
    assert policy.trust == 0.2 and len(choose()) == 0  # a greedy step
    assert policy.probes.matched == 2.0 and policy.probes.expected > 20  # the prior, plus what the probes expected


def test_compiled_adaptive_decoder_takes_the_shortest_cache_that_fits():
    """One static runner per cache length (here not compiled: the same padded steps); each call
    runs over the shortest that holds prompt + new tokens + the widest step, exactly greedy."""
    from ladref import CompiledAdaptiveDecoder

    model = tiny_model("llama", 16, 0)
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(96, 48), widths=(1, 4, 8), mode=None, cache=None)
    assert [r.max_length for r in decoder.runners] == [48, 96] and decoder.capture_s is None
    for prompt, expect in (([1, 2, 3, 1, 2], 48), ([1, 2, 3, 4] * 10, 96)):
        assert decoder.runners[decoder.runner_for(len(prompt), 24)].max_length == expect
        result = decoder(prompt, 24, eos_token_id=[])
        assert result.token_ids == hf_greedy(model, prompt, 24) and result.method == "adaptive"
    assert decoder.capture_s is not None and all(cost.label.endswith(f"max_length={runner.max_length})")
                                                 for cost, runner in zip(decoder.costs, decoder.runners))
    with pytest.raises(ValueError, match="exceeds the longest static cache"):
        decoder([1] * 80, 24)


def test_compiled_adaptive_decoder_shares_its_sources_across_cache_lengths():
    """One list of sources serves every cache length: warm Token Recycling and the suffix memory
    keep what they learned whichever cache a call takes."""
    from ladref import CompiledAdaptiveDecoder
    from ladref.fast.adaptive import remembering_proposers

    model = tiny_model("llama", 16, 0)
    sources = remembering_proposers(model)
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(48, 96), widths=(1, 4, 8), mode=None, cache=None, proposers=sources,
                                      keep_learning=True)
    short, long = [1, 2, 3, 1, 2], [1, 2, 3, 4] * 10
    for prompt in (short, long, short):
        assert decoder(prompt, 24, eos_token_id=[]).token_ids == hf_greedy(model, prompt, 24)
    assert [id(p) for p in decoder.proposers] == [id(p) for p in sources]
    recycling, suffix = sources[2], sources[3]
    assert suffix.memory.tokens >= 3 * 24 and bool((recycling.adjacency >= 0).any())  # learned over both lengths


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 40))
def test_compiled_adaptive_output_is_greedy(arch, vocab, seed, data, max_new_tokens):
    """Over either of two caches (not compiled: the same padded steps), float64: greedy_decode's and generate()'s tokens."""
    from ladref import CompiledAdaptiveDecoder

    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(32, 64), widths=(1, 4, 8), mode=None)
    result = decoder(prompt, max_new_tokens, eos_token_id=[] if eos is None else eos)
    assert result.token_ids == hf_greedy(model, prompt, max_new_tokens, eos)
    assert result.token_ids == greedy_decode(model, prompt, max_new_tokens, eos_token_id=[] if eos is None else eos).token_ids


@given(architectures, vocab_sizes, seeds, st.data(), st.integers(1, 30))
def test_compiled_adaptive_over_remembering_sources_is_greedy(arch, vocab, seed, data, max_new_tokens):
    """Sources that keep what they learned (warm Token Recycling, a suffix memory, the learned
    acceptance) over two caches, float64: each of three prompts in a row is generate()'s greedy output."""
    from ladref import CompiledAdaptiveDecoder
    from ladref.fast.adaptive import remembering_proposers

    model = tiny_model(arch, vocab, seed)
    decoder = CompiledAdaptiveDecoder(model, max_lengths=(32, 64), widths=(1, 4, 8), mode=None, cache=None,
                                      proposers=remembering_proposers(model), keep_learning=True)
    for _ in range(3):
        prompt = data.draw(prompts(vocab))
        assert decoder(prompt, max_new_tokens, eos_token_id=[]).token_ids == hf_greedy(model, prompt, max_new_tokens)


def test_compiled_adaptive_decoder_bad_input():
    from ladref import CompiledAdaptiveDecoder

    model = tiny_model("llama", 16, 0)
    with pytest.raises(TypeError, match="max_lengths"):
        CompiledAdaptiveDecoder(model, max_lengths=[])
    with pytest.raises(ValueError, match="max_lengths"):
        CompiledAdaptiveDecoder(model, max_lengths=(64, 1))
    with pytest.raises(ValueError, match="does not fit"):
        CompiledAdaptiveDecoder(model, max_lengths=(32, 256), widths=(1, 64), mode=None)
    with pytest.raises(ValueError, match="unknown compile mode"):
        CompiledAdaptiveDecoder(model, max_lengths=64, mode="fastest")
    with pytest.raises(TypeError, match="input_ids must be a list of ints"):  # checked before its length picks a cache
        CompiledAdaptiveDecoder(model, max_lengths=64, widths=(1, 4), mode=None)("abc", 4)
    with pytest.raises(TypeError, match="does not implement the Proposer protocol"):
        CompiledAdaptiveDecoder(model, max_lengths=64, mode=None, proposers=[object()])


def test_keep_learning_carries_acceptance_from_one_prompt_to_the_next():
    model = tiny_model("llama", 16, 0)  # its greedy text cycles with period 5: prompt lookup soon pays
    keeps = AdaptiveDecoder(model, cost=CPU, proposers=[PromptLookupProposer()], window=None, keep_learning=True)
    forgets = AdaptiveDecoder(model, cost=CPU, proposers=[PromptLookupProposer()], window=None)
    for decoder in (keeps, forgets):
        decoder([1, 2, 3], 60, eos_token_id=[])
    again, fresh = (decoder([1, 2, 3, 1, 2, 3], 30, eos_token_id=[]) for decoder in (keeps, forgets))
    assert again.token_ids == fresh.token_ids == hf_greedy(model, [1, 2, 3, 1, 2, 3], 30)
    assert fresh.stats.forward_tokens_per_step[0] == 1  # no evidence yet
    assert again.stats.forward_tokens_per_step[0] > 1  # the last call's evidence: its first step drafts
