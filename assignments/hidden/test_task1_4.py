"""Hidden tests of task 1.4: the step's trace (tokens, widths, window, pool, cache) equals the reference's."""

from __future__ import annotations

import pytest
import torch
from strategies import build_tiny

from ladref import LookaheadConfig, lookahead_decode
from ladref.lookahead import LookaheadState, lookahead_step
from ladref.results import DecodeStats
from ladref.runner import ModelRunner

pytestmark = pytest.mark.task1_4

# (architecture, vocabulary, seed, prompt, (W, N, G, pool_from_prompt), steps or new tokens)
RUNS = [
    ("llama", 16, 0, [1, 2, 3, 1, 2, 3, 1], (3, 4, 3, True), 10),
    ("llama", 8, 1, [5, 6, 7], (4, 3, 2, False), 10),
    ("qwen2", 16, 2, [4, 4, 2, 9, 4, 4], (2, 5, 4, True), 8),
    ("gpt2", 32, 3, [7, 1, 7, 1, 7], (5, 2, 3, True), 10),
    ("llama", 16, 3, [3], (3, 3, 0, True), 6),
    ("qwen2", 8, 0, [1, 2, 1, 2, 1, 2, 1, 2], (1, 4, 1, True), 8),
]
STARTS = [([1, 2, 3], (3, 4, 3, True)), ([9], (2, 3, 2, True)), ([4, 5, 6, 7, 8, 9, 10, 11, 12, 13], (2, 3, 2, False)),
          ([1, 1, 2, 1, 1, 2], (4, 2, 4, True)), ([5, 6], (1, 6, 1, True)), (list(range(20)), (5, 5, 5, True))]


def config_of(values) -> LookaheadConfig:
    W, N, G, from_prompt = values
    return LookaheadConfig(window_size=W, ngram_size=N, max_candidates=G, pool_from_prompt=from_prompt)


def pool_state(pool, vocab: int) -> dict[str, list]:
    return {str(key): pool.candidates(key, pool.capacity).tolist() for key in range(vocab)}


def trace(run: tuple) -> list[dict]:
    """Run `steps` lookahead steps by hand and record what each one did."""
    arch, vocab, seed, prompt, values, steps = run
    model, config = build_tiny(arch, vocab, seed), config_of(values)
    runner, state = ModelRunner(model), LookaheadState.start(torch.tensor(prompt), config)
    current, seen = runner.prefill(torch.tensor(prompt), DecodeStats()), []
    with torch.inference_mode():
        for _ in range(steps):
            accepted, width = lookahead_step(runner, state, current, config)
            seen.append({"accepted": accepted, "width": width, "window": state.window.tolist(), "steps": state.steps,
                         "past_len": runner.past_len, "pool": pool_state(state.pool, vocab)})
            current = accepted[-1]
    return seen


def decoded(run: tuple) -> dict:
    arch, vocab, seed, prompt, values, new_tokens = run
    result = lookahead_decode(build_tiny(arch, vocab, seed), prompt, 3 * new_tokens, config=config_of(values), eos_token_id=[])
    return {"token_ids": result.token_ids, "accepted": result.stats.accepted_per_step, "widths": result.stats.forward_tokens_per_step}


def sampled(run: tuple) -> list[int]:
    """lookahead_decode with sampling (the step's chooser path), from a seeded generator."""
    arch, vocab, seed, prompt, values, new_tokens = run
    generator = torch.Generator().manual_seed(seed)
    return lookahead_decode(build_tiny(arch, vocab, seed), prompt, new_tokens, config=config_of(values), eos_token_id=[],
                            do_sample=True, temperature=0.8, generator=generator).token_ids


def started(start: tuple) -> dict:
    prompt, values = start
    state = LookaheadState.start(torch.tensor(prompt), config_of(values))
    return {"window": state.window.tolist(), "steps": state.steps, "pool": pool_state(state.pool, max(prompt) + 2)}


def record() -> dict[str, list[dict]]:
    """The reference's answers (run by cases.py with the reference on the path)."""
    run_ids = [f"{r[0]}-V{r[1]}-s{r[2]}-WNG{r[4][0]}{r[4][1]}{r[4][2]}" for r in RUNS]
    return {
        "test_start": [{"id": f"start{k}", "start": list(s), "expected": started(s)} for k, s in enumerate(STARTS)],
        "test_step_trace": [{"id": i, "run": list(r), "expected": trace(r)} for i, r in zip(run_ids, RUNS)],
        "test_decode": [{"id": i, "run": list(r), "expected": decoded(r)} for i, r in zip(run_ids, RUNS)],
        "test_sampled_decode": [{"id": i, "run": list(r), "expected": sampled(r)} for i, r in zip(run_ids[:2], RUNS[:2])],
    }


def test_start(case):
    assert started(tuple(case["start"])) == case["expected"]


@pytest.mark.points(3)
def test_step_trace(case):
    expected = case["expected"]
    for k, (ours, theirs) in enumerate(zip(trace(tuple(case["run"])), expected)):
        assert ours == theirs, f"step {k + 1} differs from the reference's"


@pytest.mark.points(2)
def test_decode(case):
    assert decoded(tuple(case["run"])) == case["expected"]


def test_sampled_decode(case):
    assert sampled(tuple(case["run"])) == case["expected"]
