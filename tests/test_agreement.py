"""Agreement measurement (ladref.bench.agreement) on tiny float64 models, where everything must agree."""

from __future__ import annotations

import pytest
import torch
from strategies import hf_greedy, tiny_model

from ladref import LookaheadConfig, greedy_decode
from ladref.bench.agreement import (
    NEAR_TIE,
    AgreementRecord,
    first_divergence,
    generate_with_gaps,
    greedy_gap_at,
    measure_agreement,
    summarize_agreement,
    top2_gap,
)

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), torch.tensor([[5, 4, 6, 5, 4]])]


def test_first_divergence_and_gap():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 7]) == 2  # one stopped earlier
    assert top2_gap(torch.tensor([0.5, 3.0, 2.25, -1.0])) == pytest.approx(0.75)
    assert NEAR_TIE[torch.float16] < NEAR_TIE[torch.bfloat16]


def test_gaps_of_generate_and_of_greedy_replay_are_the_same_logits():
    model, prompt = tiny_model("llama", 16, 0), torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    tokens, gaps = generate_with_gaps(model, prompt, 10, [])
    assert tokens == hf_greedy(model, prompt.tolist(), 10) and len(gaps) == 10
    greedy = greedy_decode(model, prompt, 10, eos_token_id=[]).token_ids
    for position in (0, 4, 9):  # float64: generate's logits and greedy_decode's agree to rounding
        assert greedy_gap_at(model, prompt, greedy, position) == pytest.approx(gaps[position], abs=1e-9)


def test_float64_decoders_agree_everywhere():
    model = tiny_model("qwen2", 16, 2)
    seen = []
    records = measure_agreement(model, PROMPTS, max_new_tokens=16, configs=[LookaheadConfig(3, 3, 3)], block_size=3,
                                prompt_ids=["a", "b"], on_prompt=seen.append)
    assert seen == [0, 1]
    assert [(r.prompt_id, r.pair) for r in records] == [
        (p, pair) for p in "ab" for pair in ("greedy_decode vs generate", "jacobi vs greedy_decode", "lookahead 3/3/3 vs greedy_decode")]
    assert all(r.match and r.position is None and r.gap is None and r.near_tie is None for r in records)
    summary = summarize_agreement(records)
    assert [(s.prompts, s.identical, s.near_ties, s.other) for s in summary] == [(2, 2, 0, 0)] * 3


def test_summary_separates_near_ties_from_real_divergences():
    records = [AgreementRecord("a", "x", True, None, None, None), AgreementRecord("b", "x", False, 3, 0.01, True),
               AgreementRecord("c", "x", False, 0, 2.5, False)]
    (s,) = summarize_agreement(records)
    assert (s.prompts, s.identical, s.near_ties, s.other, s.gaps) == (3, 1, 1, 1, (0.01, 2.5))
