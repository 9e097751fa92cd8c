"""Adaptive drafting that cannot pay costs nothing: where no draft can pay, a batch's step proposes nothing.

Where no draft can pay (`BatchPolicy.may_draft`, decided on the host from the loop's one read,
`ladref.batched.gate.Gate`), a step is bare (`BatchStep.run_bare`): nothing proposed, merged or
priced, the sources still learning from the tokens kept. (Calibration: test_batched_calibration.py.)
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_acceptance import ProbeTally
from oracle_policy import DraftPolicy, Load
from strategies import architectures, prompts, seeds, tiny_model, vocab_sizes
from test_batch import reads_and_ops

from ladref import LookaheadConfig, SuffixProposer, greedy_decode
from ladref.batched.loop import decode_batch
from ladref.batched.policy import HOPE, BatchPolicy
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.sources.lookahead import BatchLookahead
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.batched.sources.recycling import BatchRecycling
from ladref.batched.sources.rows import RowProposers
from ladref.batched.step import BatchStep
from ladref.pricing.cost import CostModel
from ladref.pricing.policy import PolicySettings
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")
STEEP = CostSurface.of(CostModel.from_ratios({1: 1.0, 2: 40.0, 128: 5000.0}))  # no draft can pay
FLAT = CostSurface.of(CostModel.from_ratios({1: 1.0, 128: 1.001}))  # every draft pays
BATCH = [[1, 2, 3], [4, 5], [7, 1, 7, 1], [9]]


def every_source(vocab: int) -> list:
    """One of each kind: a device chain, the window and its pool, lookup, recycling, and a host proposer."""
    return [BatchJacobi(3), BatchLookahead(LookaheadConfig(3, 3, 2), vocab), BatchPromptLookup(3), BatchRecycling(vocab),
            RowProposers([SuffixProposer()], 4, vocab)]


def adaptive(model, batch, budgets, sources, surface, eos=(), policy=None, every=1, calibrate=False):
    """`decode_batch` with a `BatchPolicy` (given, or one on `surface`); (result, policy)."""
    policy = policy or BatchPolicy(surface, len(batch), [s.name for s in sources], max(s.depth for s in sources),
                                   PolicySettings(calibrate=calibrate))
    result = decode_batch(model, batch, budgets, {"eos_token_id": list(eos)}, "adaptive", sources, policy, steps_per_read=every)
    return result, policy


def greedy(model, batch, budgets, eos=()):
    return [greedy_decode(model, p, b, eos_token_id=list(eos)).token_ids for p, b in zip(batch, budgets)]


def counted(obj: object, name: str, calls: dict) -> None:
    """Count the calls of `obj`'s method `name` in ``calls[name]`` (an instance attribute over the class's)."""
    method = getattr(obj, name)

    def count(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return method(*args, **kwargs)

    setattr(obj, name, count)


@pytest.mark.parametrize("surface, pays", [(STEEP, False), (FLAT, True)])
def test_a_step_no_draft_can_pay_for_proposes_and_prices_nothing(surface, pays):
    model = tiny_model("llama", 16, 0)
    sources = every_source(16)
    policy = BatchPolicy(surface, len(BATCH), [s.name for s in sources], max(s.depth for s in sources))
    calls = {}
    for source in sources:
        counted(source, "propose", calls)
        counted(source, "learn", calls)
    counted(policy, "choose", calls)
    result, _ = adaptive(model, BATCH, 20, sources, surface, policy=policy)
    assert result.token_ids == greedy(model, BATCH, [20] * len(BATCH))
    steps = result.passes - 1  # (the prompts' prefill is a pass)
    assert calls["learn"] == len(sources) * steps  # every step, bare or not, teaches every source
    if pays:
        assert calls["choose"] >= steps and calls["propose"] == len(sources) * calls["choose"]
        assert all(max(row.stats.forward_tokens_per_step) > 1 for row in result)
    else:  # the first step's drafts only (checked before any forward pass, as the one-prompt loop proposes its first)
        assert calls["choose"] == 1 and calls["propose"] == len(sources)
        assert all(row.stats.forward_tokens_per_step == [1] * row.stats.steps for row in result)


class AlwaysProposes(BatchPolicy):
    """A policy without the gate: every step proposes, and is priced (the engine before bare steps)."""

    may_draft = None


def test_bare_steps_teach_the_sources_what_unfed_proposals_teach_them():
    """A bare step's outcome is the one of a step whose proposals were all left unfed: each source's
    state after a call is the same either way (Jacobi's guess, the recycling matrix, the lookahead
    pool and window, a host proposer's rows' texts)."""
    model = tiny_model("llama", 16, 0)
    runs = []
    for policy_type in (BatchPolicy, AlwaysProposes):
        sources = every_source(16)
        policy = policy_type(STEEP, len(BATCH), [s.name for s in sources], max(s.depth for s in sources))
        result, _ = adaptive(model, BATCH, [12, 20, 20, 16], sources, STEEP, policy=policy)
        runs.append((result, sources))
    (bare, a), (unfed, b) = runs
    assert bare.token_ids == unfed.token_ids == greedy(model, BATCH, [12, 20, 20, 16]) and bare.passes == unfed.passes
    assert torch.equal(a[0].guess, b[0].guess)
    assert torch.equal(a[1].grid, b[1].grid) and torch.equal(a[1].pool.tokens, b[1].pool.tokens)
    assert torch.equal(a[3].adjacency, b[3].adjacency) and int((a[3].adjacency < 16).sum()) > 0  # it did learn
    assert a[4].contexts == b[4].contexts and len(a[4].contexts[0]) > 10  # the last row's text, the suffix trie's


def test_the_gate_follows_the_cache_as_it_grows():
    """Drafting dear while the cache is short and free once it is long: the first steps are bare, the
    later ones propose, decided again as kv grows (no read of its own)."""
    short, long = (1.0, 40.0, 5000.0), (1.0, 1.001, 1.002)
    cost = CostModel((1, 2, 128), (8, 24), (tuple(0.01 * r for r in short), tuple(0.01 * r for r in long)))
    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3, 1, 2]]
    sources = [BatchJacobi(4)]
    policy = BatchPolicy(CostSurface.of(cost), 1, ["jacobi"], 4)
    calls = {}
    counted(policy, "choose", calls)
    result, _ = adaptive(model, batch, 40, sources, None, policy=policy)
    assert result.token_ids == greedy(model, batch, [40])
    fed = result[0].stats.forward_tokens_per_step
    assert fed[:5] == [1] * 5 and max(fed) > 1  # bare at first, drafting later
    assert 1 < calls["choose"] < result.passes - 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(0, 300), st.sampled_from([None, 3, 8]), st.sampled_from([0.25, 0.5, 1.0, 1.5]),
       st.sampled_from([0.0, 0.5, 2.0, 6.0]), st.sampled_from([(0.015, 0.004), (0.01, 0.0004), (0.01, 0.00002)]), st.data())
def test_the_gate_is_the_one_prompt_may_draft(rows, kv, cells, trust, window, roofline, data):
    """`BatchPolicy.may_draft` is `DraftPolicy.may_draft` for a row of a batch of B whose other rows
    yield a token each, at any kv (between and past the measured lengths: worked out per segment)."""
    a, b = roofline
    growth = data.draw(st.sampled_from([1.0, 1.5, 3.0]))  # t grows with kv: a steeper curve at longer caches
    surface = CostSurface((1, 4, 16), tuple(CostModel((1, 2, 4, 8, 16, 32), (16, 64, 256), tuple(
        tuple(max(a, B * q * b * (1 + (growth - 1) * k / 2)) for q in (1, 2, 4, 8, 16, 32)) for k in range(3)))
        for B in (1, 4, 16)))
    policy = BatchPolicy(surface, rows, ["prompt_lookup", "lookahead"], 4)
    hope = [int(trust * HOPE), int(max(window, policy.settings.window_bonus) * HOPE)]
    alone = DraftPolicy(surface.at(rows), None, PolicySettings())
    alone.probes, alone.window_value = ProbeTally(1.0, trust), window
    expected = alone.may_draft(kv, cells, Load(rows - 1.0))
    if policy.may_draft(rows, kv, cells, hope) != expected:  # only where kv sits on the crossing itself
        assert any(alone.may_draft(kv + d, cells, Load(rows - 1.0)) != expected for d in (-1e-6, 1e-6))


def test_the_gate_costs_no_read_and_a_bare_pass_little_more_than_greedys():
    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3, 1, 2]] * 3  # rows that finish together

    def per_pass(call):
        (reads_short, ops_short), (reads_long, ops_long) = (reads_and_ops(lambda n=n: call(n)) for n in (12, 30))
        passes = call(30).passes - call(12).passes
        return (reads_long - reads_short) / passes, (ops_long - ops_short) / passes

    sources = lambda: [BatchPromptLookup(3), BatchRecycling(16)]  # noqa: E731 - fresh each call
    plain = per_pass(lambda n: decode_batch(model, batch, n, {"eos_token_id": []}, "greedy"))
    bare = per_pass(lambda n: adaptive(model, batch, n, sources(), STEEP, calibrate=True)[0])
    drafting = per_pass(lambda n: adaptive(model, batch, n, sources(), FLAT)[0])
    assert plain[0] == bare[0] == drafting[0] == 1.0  # one read a pass, the gate's hope and the timing folded in
    assert bare[1] < plain[1] + 40 and bare[1] < drafting[1] / 3  # the sources' learning, no proposing nor pricing
    print(f"ops a pass: greedy {plain[1]}, bare {bare[1]}, drafting {drafting[1]}")


@settings(max_examples=12, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_steps_that_switch_between_drafting_and_bare_keep_every_rows_tokens(arch, vocab, seed, data):
    """Whatever the gate decides at each step (here: at random), inside runs of k steps too, the rows'
    tokens are greedy's: a bare step after a drafting one moves the frontier past that step's entries."""
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))
    eos = data.draw(st.sampled_from([[], [data.draw(st.integers(0, vocab - 1))]]))
    every = data.draw(st.integers(1, 4))
    sources = [s for s, keep in zip(every_source(vocab), data.draw(st.lists(st.booleans(), min_size=5, max_size=5))) if keep] \
        or [BatchJacobi(2)]
    pattern = itertools.cycle(data.draw(st.lists(st.booleans(), min_size=1, max_size=6)))
    policy = BatchPolicy(FLAT, len(batch), [s.name for s in sources], max(s.depth for s in sources))
    policy.may_draft = lambda rows, kv, cells, hope: next(pattern)
    result, _ = adaptive(model, batch, budgets, sources, FLAT, eos, policy=policy, every=every)
    assert result.token_ids == greedy(model, batch, budgets, eos)


@settings(max_examples=10, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_a_captured_batch_that_switches_between_drafting_and_bare_runs_keeps_every_rows_tokens(arch, vocab, seed, data):
    """The captured decoder's runs, bare where the gate says so (here: at random): a drafting run
    after bare ones plans again (its plan in hand is older than they are) and feeds every node."""
    from ladref import CapturedBatchDecoder, LookaheadProposer, PromptLookupProposer
    from ladref.batched.program import BARE

    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=3))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))
    pattern = itertools.cycle(data.draw(st.lists(st.booleans(), min_size=2, max_size=6)))
    decoder = CapturedBatchDecoder(model, [LookaheadProposer(LookaheadConfig(2, 3, 2)), PromptLookupProposer(3)], max_length=64,
                                   mode=None, steps_per_read=data.draw(st.integers(1, 3)), cost=FLAT, widths=(0, 2))
    answers, plans, plan = [], [], BatchStep.plan
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchPolicy, "may_draft", lambda self, rows, kv, cells, hope: answers.append(next(pattern)) or answers[-1])
        patch.setattr(BatchStep, "plan", lambda self, state: plans.append(1) or plan(self, state))
        assert decoder(batch, budgets, eos_token_id=[]).token_ids == greedy(model, batch, budgets)
    assert set(decoder.shapes) <= {BARE, (0, False), (0, True), (2, False), (2, True), (decoder.draft_width, True)}
    drafting = sum(steps for shape, steps in decoder.shapes.items() if shape != BARE)
    again = sum(not a and b for a, b in zip(answers, answers[1:]))  # a drafting run after a bare one
    assert len(plans) == 1 + drafting + again  # the call's first plan, each drafting step's next, and one after bare runs


def test_the_gate_decides_again_as_rows_leave():
    """Eight rows fill a CPU-like machine's compute: bare steps; once seven have left, the last one
    alone is weight-bound again, and proposes."""
    model = tiny_model("llama", 16, 0)
    batch, budgets = [[1, 2, 3, 1, 2, 3]] + [[4, 5]] * 7, [30] + [3] * 7
    sources = [BatchPromptLookup(4)]
    policy = BatchPolicy(CostSurface.roofline(0.015, 0.004), len(batch), ["prompt_lookup"], 4)
    calls = {}
    counted(policy, "choose", calls)
    result, _ = adaptive(model, batch, budgets, sources, None, policy=policy)
    assert result.token_ids == greedy(model, batch, budgets)
    fed = result[0].stats.forward_tokens_per_step
    assert fed[:3] == [1, 1, 1] and max(fed[3:]) > 1 and calls["choose"] > 3


def test_where_only_the_learned_rates_close_the_gate_it_still_proposes_now_and_then():
    """Rates learn only from proposals: where the learned rates say no draft pays but a node worth a
    whole token would, the policy proposes after 1, 2, 4, ... noes (at most `explore`), again every
    step once the rates say yes; where even a whole token a node would not pay, never."""
    surface = CostSurface.roofline(0.01, 0.0015)  # 4 rows: a 2-token step costs 1.2 plain ones
    policy = BatchPolicy(surface, 4, ["prompt_lookup"], 4, PolicySettings(explore=16))
    low, high = [HOPE, HOPE // 20] + [HOPE // 10] * 4, [HOPE, HOPE // 20] + [HOPE] * 4
    kv = surface.kv_lengths[0]
    answers = [policy.may_draft(4, kv, None, low) for _ in range(50)]
    assert [i + 1 for i, yes in enumerate(answers) if yes] == [1, 3, 7, 15, 31, 47]
    assert all(policy.may_draft(4, kv, None, high) for _ in range(3)) and policy.may_draft(4, kv, None, low)  # 1 again
    assert all(policy.may_draft(4, kv, None, low[:2]) for _ in range(3))  # no rates: a whole token a node, which pays
    steep = BatchPolicy(STEEP, 4, ["prompt_lookup"], 4)
    assert not any(steep.may_draft(4, kv, None, low) for _ in range(40))
