"""A run of steps between two reads (`decode_batch(..., steps_per_read=k)`): the same tokens and steps as one
read a step, with rows stopping (EOS, budget) inside a run, and one read every k steps.

Between reads a step feeds every proposed node, the frontier moves past the most entries a step can keep,
and a row that stopped keeps nothing more until the read drops it: the shape of a run of steps captured as
one program. Float64 tiny models: every row must equal its batch-1 greedy output exactly.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import architectures, prompts, seeds, tiny_model, vocab_sizes
from test_batch import reads_and_ops

from ladref import LookaheadConfig, greedy_decode
from ladref.batched.loop import decode_batch
from ladref.batched.policy import BatchPolicy
from ladref.batched.sample import BatchSampler
from ladref.batched.sources.jacobi import BatchJacobi
from ladref.batched.sources.lookahead import BatchLookahead
from ladref.batched.sources.lookup import BatchPromptLookup
from ladref.batched.sources.recycling import BatchRecycling
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCES = {  # (sources, choice) for B rows and a vocabulary of V
    "greedy": lambda rows, vocab: ([], None),
    "jacobi": lambda rows, vocab: ([BatchJacobi(3)], None),
    "prompt_lookup": lambda rows, vocab: ([BatchPromptLookup(4)], None),
    "lookahead": lambda rows, vocab: ([BatchLookahead(LookaheadConfig(3, 3, 2), vocab)], None),
    "recycling": lambda rows, vocab: ([BatchRecycling(vocab)], None),
    "adaptive": lambda rows, vocab: ([BatchJacobi(4)], BatchPolicy(CostSurface.roofline(0.01, 0.00002), rows, ["jacobi"], 4)),
}


def run(model, batch, budgets, eos, name, every):
    sources, choice = SOURCES[name](len(batch), model.config.vocab_size)
    return decode_batch(model, batch, budgets, {"eos_token_id": eos}, name, sources, choice, steps_per_read=every)


@pytest.mark.parametrize("name", SOURCES)
@settings(max_examples=5, deadline=None)
@given(architectures, vocab_sizes, seeds, st.data())
def test_a_run_of_steps_between_reads_keeps_every_rows_tokens_and_steps(name, arch, vocab, seed, data):
    model = tiny_model(arch, vocab, seed)
    batch = data.draw(st.lists(prompts(vocab), min_size=1, max_size=4))
    budgets = data.draw(st.lists(st.integers(1, 14), min_size=len(batch), max_size=len(batch)))  # budget cuts inside a run
    eos = data.draw(st.sampled_from([[], [data.draw(st.integers(0, vocab - 1))]]))  # EOS cuts inside a run
    every = data.draw(st.integers(2, 5))
    once, runs = run(model, batch, budgets, eos, name, 1), run(model, batch, budgets, eos, name, every)
    assert runs.token_ids == once.token_ids == [greedy_decode(model, p, b, eos_token_id=eos).token_ids for p, b in zip(batch, budgets)]
    for a, b in zip(once, runs):
        assert (b.stats.steps, b.stats.accepted_per_step, b.stats.accepted_by_source) == \
            (a.stats.steps, a.stats.accepted_per_step, a.stats.accepted_by_source)
    assert once.passes <= runs.passes < once.passes + every  # at most k - 1 steps past the last stop, before its read
    if not eos:
        assert runs.passes == once.passes  # budgets alone: a run ends before any row can spend its budget


@pytest.mark.parametrize("name", ["greedy", "lookahead", "prompt_lookup"])
def test_the_host_reads_once_a_run_and_no_pass_follows_the_last_budget(name):
    model = tiny_model("llama", 16, 0)
    batch = [[1, 2, 3, 1, 2], [4, 5, 4, 5, 4], [7, 7, 3]]
    (reads_one, passes_one), (reads, passes) = [
        (reads_and_ops(lambda: run(model, batch, [24, 20, 24], [], name, every))[0], run(model, batch, [24, 20, 24], [], name, every).passes)
        for every in (1, 4)]
    assert passes == passes_one  # a run ends before any row can spend its budget: no row idles in one
    fixed = reads_one - passes_one  # the reads outside the steps (one a step, plus the last read, with k = 1)
    if name == "greedy":  # one token a step: runs of 4 until the 20-token row's budget, then of 4 again
        assert reads - fixed == (passes - 1) // 4 + 1
    else:  # a drafting step may keep deepest + 1 tokens: the runs shorten as the budgets near their end
        assert reads - fixed <= (passes - 1) // 2 + 1 < reads_one - fixed


def test_steps_per_read_is_checked():
    model, batch = tiny_model("llama", 16, 0), [[1, 2, 3]]
    with pytest.raises(ValueError, match="steps_per_read must be >= 1, got 0"):
        run(model, batch, [4], [], "jacobi", 0)
    with pytest.raises(TypeError, match="steps_per_read must be an int, got bool"):
        run(model, batch, [4], [], "jacobi", True)
    sampler = BatchSampler.__new__(BatchSampler)  # (never used: the call is refused first)
    with pytest.raises(ValueError, match="steps_per_read > 1 needs greedy verification"):
        decode_batch(model, batch, 4, {}, "sample", sampler=sampler, steps_per_read=2)
