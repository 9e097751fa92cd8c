"""Task 1.4: the combined lookahead step (one forward, window + pool update, verify, KV commit)."""

import json
from pathlib import Path

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

from ladref import DraftTree, LookaheadConfig, LookaheadProposer, greedy_decode, jacobi_decode, lookahead_decode
from ladref.call import DecodeCall
from ladref.proposer import merged_tree, step_needs
from ladref.results import DecodeStats
from ladref.runner import ModelRunner
from ladref.sampling import SamplingChooser, Warp
from ladref.step import draft_step, run_drafting

pytestmark = pytest.mark.task1_4
RECORDED = Path(__file__).parent / "data" / "lookahead_v0_2.json"


def started(model, prompt, config):
    runner, proposer = ModelRunner(model), LookaheadProposer(config)
    proposer.begin(prompt)
    current = runner.prefill(torch.tensor(prompt), DecodeStats())
    return runner, proposer, current


def step(runner, proposer, current, context):
    outcome = draft_step(runner, current, merged_tree([proposer], context, runner.vocab_size), proposer.window)
    proposer.learn(outcome)
    return outcome


def test_step_accepts_a_full_ngram_and_commits_its_cache():
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]
    greedy = hf_greedy(model, prompt, 6)
    config = LookaheadConfig(window_size=3, ngram_size=4, max_candidates=3, pool_from_prompt=False)
    runner, proposer, current = started(model, prompt, config)
    proposer.pool.add([current, 0, 0, 0])  # a wrong candidate ...
    proposer.pool.add([current, *greedy[:3]])  # ... and greedy's own next 3 tokens
    outcome = step(runner, proposer, current, prompt)
    # 1. all N tokens accepted: the 3 verified ones plus the model's own next token
    assert outcome.tokens == greedy[:4]
    assert outcome.fed == (4 - 1) * 3 + 2 * 3  # the window, then both candidates (no shared prefix)
    # 2. the cache equals that of a plain causal forward over the accepted sequence
    reference = ModelRunner(model)
    reference.forward(torch.tensor(prompt + greedy[:3]))
    assert runner.past_len == reference.past_len == len(prompt) + 3
    for ours, theirs in zip(runner.cache.layers, reference.cache.layers):
        torch.testing.assert_close(ours.keys, theirs.keys, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(ours.values, theirs.values, rtol=1e-9, atol=1e-9)
    # 3. so the next step's logits are greedy's
    logits = runner.forward(torch.tensor([outcome.tokens[-1]]))
    expected = model(torch.tensor([prompt + greedy[:4]])).logits[0, -1]
    torch.testing.assert_close(logits[0], expected, rtol=1e-9, atol=1e-9)


def test_step_without_candidates_is_one_greedy_token_and_slides_the_window():
    model, prompt = tiny_model("qwen2", 16, 1), [4, 4, 2]
    config = LookaheadConfig(window_size=4, ngram_size=3, max_candidates=2, pool_from_prompt=False)
    runner, proposer, current = started(model, prompt, config)
    old = proposer.window.grid.clone()
    outcome = step(runner, proposer, current, prompt)
    assert outcome.tokens == hf_greedy(model, prompt, 1) and outcome.fed == (3 - 1) * 4
    assert proposer.window.grid.shape == (2, 4) and proposer.window.steps == 1
    assert torch.equal(proposer.window.grid[0, 1:], old[1, 1:])  # the old newest row moved up
    assert runner.past_len == len(prompt)  # only the current token was committed


def test_window_predictions_are_jacobi_updates_and_feed_the_pool():
    model, prompt = tiny_model("llama", 16, 2), [5, 6, 7, 8]
    config = LookaheadConfig(window_size=3, ngram_size=2, max_candidates=0, pool_from_prompt=False)
    runner, proposer, current = started(model, prompt, config)
    window = proposer.window.grid.clone()
    window[0, 0] = current
    step(runner, proposer, current, prompt)
    # with N = 2 the window is one row and the new row is one Jacobi iteration of it
    expected = model(torch.tensor([prompt + window[0, 1:].tolist()])).logits[0, len(prompt) - 1 :].argmax(-1)
    assert proposer.window.grid[0].tolist() == expected.tolist()
    assert len(proposer.pool) == len(set(zip(window[0].tolist(), expected.tolist())))


def test_step_with_topk_reports_the_top_tokens_after_every_fed_token():
    """With topk > 0 (as Token Recycling asks) the outcome holds the top-k next tokens after every fed token."""
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]
    config = LookaheadConfig(window_size=3, ngram_size=3, max_candidates=2, pool_from_prompt=False)
    runner, proposer, current = started(model, prompt, config)
    tree = DraftTree.from_paths([[4, 5], [6]], "s")  # nodes 4, 5 (under 4), 6
    outcome = draft_step(runner, current, tree, proposer.window, topk=3)
    L = outcome.window_tokens + 1  # the lookahead branch, current token included
    assert outcome.top.shape == (outcome.fed, 3) == (L + 3, 3)
    # row 0: after the current token; the row of node 5: after its root path 4, 5
    for row, sequence in ((0, prompt), (L + 1, prompt + [4, 5])):
        assert outcome.top[row].tolist() == model(torch.tensor([sequence])).logits[0, -1].topk(3).indices.tolist()
    assert outcome.root_pred == outcome.top[0, 0] and outcome.node_preds.tolist() == outcome.top[L:, 0].tolist()
    assert runner.past_len == len(prompt) + len(outcome.path)  # the current token and the accepted path


def test_a_step_with_nothing_to_verify_is_one_greedy_token():
    """An empty tree without a window: the current token is fed alone at its position, its argmax
    accepted, its top-k reported and its K/V committed, as a plain forward pass would."""
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]
    runner, plain = ModelRunner(model), ModelRunner(model)
    current = runner.prefill(torch.tensor(prompt), DecodeStats())
    plain.prefill(torch.tensor(prompt), DecodeStats())
    outcome = draft_step(runner, current, DraftTree.from_paths([], "s"), None, topk=3)
    logits = plain.forward(torch.tensor([current]))[-1]  # (V,)
    assert outcome.tokens == [int(logits.argmax())] == [outcome.root_pred] and outcome.path == []
    assert outcome.input_ids.tolist() == [current] and outcome.position == len(prompt) - 1 and outcome.window_tokens == 0
    assert outcome.top.tolist() == [logits.topk(3).indices.tolist()] and outcome.node_preds.shape == (0,)
    assert runner.past_len == plain.past_len == len(prompt)
    assert torch.equal(runner.forward(torch.tensor([outcome.tokens[0]])), plain.forward(torch.tensor([outcome.tokens[0]])))


def test_verification_speeds_up_repetitive_text():
    model, prompt = tiny_model("llama", 16, 0), [1, 2, 3]  # its greedy text cycles with period 5
    result = lookahead_decode(model, prompt, 60, config=LookaheadConfig(4, 4, 4), eos_token_id=[])
    assert result.token_ids == hf_greedy(model, prompt, 60)
    assert result.stats.compression > 2.0  # S: tokens per step
    stats = result.stats
    assert [1 + w + d for w, d in zip(stats.window_tokens_per_step, stats.draft_tokens_per_step)] == stats.forward_tokens_per_step
    assert set(stats.window_tokens_per_step) == {3 * 4 - 1}
    assert sum(stats.accepted_by_source["lookahead"].values()) <= stats.steps


@given(architectures, vocab_sizes, seeds, st.data(), lookahead_configs(), st.integers(1, 40))
def test_lookahead_output_is_greedy(arch, vocab, seed, data, config, max_new_tokens):
    model = tiny_model(arch, vocab, seed)
    prompt = data.draw(prompts(vocab))
    eos = data.draw(st.none() | st.integers(0, vocab - 1))
    expected = hf_greedy(model, prompt, max_new_tokens, eos)
    ours = greedy_decode(model, prompt, max_new_tokens, eos_token_id=[] if eos is None else eos)
    assert ours.token_ids == expected
    result = lookahead_decode(model, prompt, max_new_tokens, config=config, eos_token_id=[] if eos is None else eos)
    assert result.token_ids == expected
    stats = result.stats
    assert stats.new_tokens == len(expected) and stats.steps <= len(expected)
    assert all(1 <= a <= config.ngram_size for a in stats.accepted_per_step)
    assert max(stats.forward_tokens_per_step) <= config.max_step_tokens()


class ZeroTwoChooser(SamplingChooser):
    """ladref 0.2.0's chooser, kept by the tests to replay the draws it recorded: SamplingChooser's
    multi-round rule for deterministic drafts, which the library's chooser now replaces by
    `ladref.accept.accept_one` against the first draft (the same law, fewer draws)."""

    def choose(self, context, logits, proposals):
        # for the distinct drafts t_1, t_2, .. in order: accept t_i with probability q(t_i) / sum(q) (q = p at first);
        # on rejection zero q(t_i) and try t_{i+1};
        # when every draft is rejected, draw the token from q renormalised.
        q = self.probs(context, logits).clone()
        for token in dict.fromkeys(int(t) for t in proposals):
            mass = q.sum()
            if torch.rand((), dtype=torch.float64, generator=self.generator) * mass < q[token]:
                return token
            q[token] = 0.0
        return int(torch.multinomial(q / q.sum(), 1, generator=self.generator))


def lookahead_replayed(model, prompt, max_new_tokens, config, eos, chooser):
    """`lookahead_decode` for one prompt with `chooser` verifying: its loop, `run_drafting`, run in one
    `DecodeCall` as `ladref.decoders.draft.decode_with_proposers` runs it."""
    proposers, extent = [LookaheadProposer(config)], config.step_extent()
    call = DecodeCall.begin(model, prompt, max_new_tokens, step_needs(proposers, extent).reach, {"eos_token_id": eos})
    run_drafting(call.runner, call.prompt, proposers, call.sink, call.stats, chooser, call.position_limit, max_depth=extent)
    return call.finish("lookahead")


@pytest.mark.parametrize("case", range(80), ids=lambda i: f"case{i}")
def test_same_tokens_and_steps_as_before_the_draft_tree(case):
    """Recorded with ladref 0.2.0, whose verification branch fed G flat candidate rows: merging
    them into a trie and running Jacobi decoding through the same tree step changed no token and
    no step, greedy or sampled.

    The 60 greedy cases run `lookahead_decode`. The 20 sampled ones replay 0.2.0's draws through
    the test kit's chooser, `ZeroTwoChooser` (0.2.0's rule), in lookahead_decode's own loop, so the
    step and the tree walk stay pinned draw for draw; the library's chooser, which draws
    differently with the same law, is checked by law in tests/test_sampling.py."""
    c = json.loads(RECORDED.read_text())["cases"][case]
    model = build_tiny(c["arch"], c["vocab"], c["seed"])
    eos = [] if c["eos"] is None else c["eos"]
    config = LookaheadConfig(**c["config"])
    if c["sample"]:
        chooser = ZeroTwoChooser(Warp(c["sample"]["temperature"]), torch.Generator().manual_seed(c["sample"]["seed"]))
        result = lookahead_replayed(model, c["prompt"], c["max_new_tokens"], config, eos, chooser)
    else:
        result = lookahead_decode(model, c["prompt"], c["max_new_tokens"], config=config, eos_token_id=eos)
    assert (result.token_ids, result.stats.accepted_per_step) == (c["tokens"], c["accepted_per_step"])
    jacobi = jacobi_decode(model, c["prompt"], c["max_new_tokens"], block_size=c["jacobi_block_size"], eos_token_id=eos)
    assert (jacobi.token_ids, jacobi.stats.accepted_per_step) == (c["jacobi_tokens"], c["jacobi_accepted_per_step"])
    assert jacobi.stats.forward_tokens_per_step == c["jacobi_forward_tokens_per_step"]
