"""Lookahead decoding with LADE's choices, built from ladref's building blocks (nothing patched).

LADE 0.0.2 (``lade/decoding.py``, ``jacobi_greedy_search_multilevel``) makes two choices ladref
does not; each can be switched on here, so that every systematic difference is measured alone:

* **window seeding** (`LadeChoices.seed_window`): LADE starts from ONE row of W+N-3 prompt tokens
  drawn at random (``random.seed(10)``, ``random.choice(prompt)``) behind the current token, and
  grows the window one Jacobi row per step while trimming its first column (the "fill" steps),
  until it is (N-1, W); ladref starts from a full (N-1, W) window of the prompt's last tokens. In
  ladref's terms a fill step is an ordinary step on a (rows, width) window whose next window is
  ``[window; new_row][:, 1:]``; `ladref.masks.build_step_inputs` takes any such shape.
* **N-1 on a full match** (`LadeChoices.cap_full_match`): LADE's verification loop stops one short
  when all N-1 candidate tokens match (its ``gg`` ends at N-2), so a step accepts at most N-1
  tokens; ladref accepts all N (the N-1 candidate tokens plus the model's next one).

With both on and no prompt pool (LADE 0.0.2 has none), the decoder follows LADE's schedule step
for step. The pool, the harvest (one n-gram per window column), the LRU per key of capacity G,
the combined mask and the KV-cache commit are ladref's, and they are LADE's too.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch
from ladref_api import (
    DecodeStats,
    LookaheadConfig,
    LookaheadState,
    ModelRunner,
    NGramPool,
    Verdict,
    build_step_inputs,
    verify_greedy,
)

LADE_SEED = 10  # lade/decoding.py: random.seed(10) before drawing the first window row


@dataclass(frozen=True)
class LadeChoices:
    """Which of LADE's choices the decoder copies.

    Attributes:
        seed_window: LADE's first window row (random prompt tokens) and growing fill steps.
        cap_full_match: accept at most N-2 candidate tokens (+1 of the model's own) per step.
    """

    seed_window: bool = True
    cap_full_match: bool = True


@dataclass
class MimicResult:
    """What `mimic_decode` returns (the fields the comparison reads from every decoder).

    Attributes:
        token_ids: generated ids, ending with EOS when it was produced.
        steps: forward passes after the prefill.
        fed: tokens fed to each of them.
        wall_time_s: seconds of the whole call, prefill included.
    """

    token_ids: list[int]
    steps: int
    fed: list[int]
    wall_time_s: float


def lade_first_row(prompt: list[int], config: LookaheadConfig) -> torch.Tensor:
    """LADE's first window row: the current token's slot then W+N-3 random prompt tokens.

    Returns:
        (1, W+N-2) long tensor; cell (0, 0) is overwritten with the current token by each step.
    """
    rng = random.Random(LADE_SEED)
    width = config.window_size + config.ngram_size - 3
    return torch.tensor([[prompt[-1]] + [rng.choice(prompt) for _ in range(width)]], dtype=torch.long)


def start_state(prompt: torch.Tensor, config: LookaheadConfig, choices: LadeChoices) -> LookaheadState:
    """ladref's own start, or LADE's one-row window with an empty pool."""
    if not choices.seed_window:
        return LookaheadState.start(prompt, config)
    return LookaheadState(lade_first_row(prompt.tolist(), config), NGramPool(config.ngram_size, config.capacity))


def cap(verdict: Verdict, candidates: torch.Tensor) -> Verdict:
    """LADE's accept rule: a full match of N-1 candidate tokens keeps only N-2 of them (+1)."""
    n = candidates.shape[1]
    if verdict.matched < n:
        return verdict
    return Verdict(verdict.tokens[:n], verdict.best, n - 1)


def mimic_step(runner: ModelRunner, state: LookaheadState, current: int, config: LookaheadConfig,
               choices: LadeChoices) -> tuple[list[int], int]:
    """One step: `ladref.lookahead.lookahead_step` with LADE's fill phase and accept rule.

    Args:
        runner: model and KV cache; the cache holds everything before `current`.
        state: window (rows, width) and pool, updated in place.
        current: the last accepted token.
        config: W, N, G (``pool_from_prompt`` is ignored when seeding LADE's way).
        choices: which LADE choices to copy.

    Returns:
        (accepted tokens, tokens fed to the model).
    """
    past, rows = runner.past_len, state.window.shape[0]
    full = rows == config.ngram_size - 1
    candidates = state.pool.candidates(current, config.max_candidates) if full else torch.empty(0, config.ngram_size - 1, dtype=torch.long)
    step = build_step_inputs(current, state.window, candidates, past)
    last_row, cand_index = step.layout.last_row_index(), step.layout.candidate_index()
    keep = torch.cat([torch.tensor([0]), last_row, cand_index.flatten()])
    preds = runner.forward(step.input_ids, step.position_ids, step.allowed, keep).argmax(dim=-1).cpu()
    width = state.window.shape[1]
    first, new_row, cand_preds = preds[0], preds[1 : width + 1], preds[width + 1 :].view_as(candidates)
    window = step.input_ids[: step.layout.lookahead_len].view_as(state.window)  # cell (0, 0) = current
    if full:
        if state.steps >= config.ngram_size - 2:
            state.pool.harvest(window, new_row)
        state.window = torch.cat([window[1:], new_row[None]])
    else:  # LADE's fill step: one more row, one column less
        state.window = torch.cat([window, new_row[None]])[:, 1:]
    state.steps += 1
    verdict = verify_greedy(candidates, first, cand_preds)
    verdict = cap(verdict, candidates) if choices.cap_full_match and candidates.shape[0] else verdict
    kept = torch.tensor([0]) if verdict.best is None else torch.cat([torch.tensor([0]), cand_index[verdict.best, : verdict.matched]])
    runner.commit(past, kept)
    return verdict.tokens.tolist(), step.layout.length


@torch.inference_mode()
def mimic_decode(model: torch.nn.Module, prompt: list[int], max_new_tokens: int, config: LookaheadConfig,
                 choices: LadeChoices, eos_token_id: int = 2) -> MimicResult:
    """Greedy lookahead decoding with the chosen LADE behaviours; output identical to greedy.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        prompt: the prompt ids.
        max_new_tokens: most tokens to generate.
        config: W, N, G (use ``pool_from_prompt=False`` to compare with LADE 0.0.2).
        choices: `LadeChoices`.
        eos_token_id: the id that ends the output (kept in it).
    """
    start = time.perf_counter()
    runner = ModelRunner(model)
    ids = torch.tensor(prompt, dtype=torch.long)
    state = start_state(ids, config, choices)
    current = runner.prefill(ids, DecodeStats())
    tokens, fed = [], []
    while len(tokens) < max_new_tokens and (not tokens or tokens[-1] != eos_token_id):
        accepted, width = mimic_step(runner, state, current, config, choices)
        fed.append(width)
        for token in accepted:
            tokens.append(token)
            if token == eos_token_id or len(tokens) == max_new_tokens:
                break
        current = accepted[-1]
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
    return MimicResult(tokens, len(fed), fed, time.perf_counter() - start)

