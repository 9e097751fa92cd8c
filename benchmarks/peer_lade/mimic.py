"""Lookahead decoding with LADE's choices, built from ladref's building blocks (nothing patched).

LADE 0.0.2 (``lade/decoding.py``, ``jacobi_greedy_search_multilevel``) makes two choices ladref
does not; each can be switched on here, so that every systematic difference is measured alone:

* **window seeding** (`LadeChoices.seed_window`): LADE starts from ONE row of W+N-3 prompt tokens
  drawn at random (``random.seed(10)``, ``random.choice(prompt)``) behind the current token, and
  grows the window one Jacobi row per step while trimming its first column (the "fill" steps),
  until it is (N-1, W); ladref starts from a full (N-1, W) window of the prompt's last tokens
  (`ladref.sources.lookahead.LookaheadWindow`). In ladref's terms a fill step is an ordinary step on a
  (rows, width) window whose next window is ``[window; new_row][:, 1:]`` (`LadeWindow`);
  `ladref.masks.build_step_inputs` takes any such shape.
* **N-1 on a full match** (`LadeChoices.cap_full_match`): LADE's verification loop stops one short
  when all N-1 candidate tokens match (its ``gg`` ends at N-2), so a step accepts at most N-1
  tokens; ladref accepts all N (the N-1 candidate tokens plus the model's next one).

Beyond these two, the mimic keeps LADE's verification layout: its G candidates are fed as G
separate chains of N-1 tokens (`DraftTree.chains`, the paper's flat candidate rows), not merged
into ladref's trie, so the tokens fed per step can be compared with LADE's list, and the accepted
chain is LADE's: the first one with the longest run of tokens greedy agrees with (`lade_verify`).

With both choices on and no prompt pool (LADE 0.0.2 has none), the decoder follows LADE's schedule
step for step. The pool, the harvest (one n-gram per window column), the LRU per key of capacity G,
the combined mask and the KV-cache commit are ladref's, and they are LADE's too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from ladref_api import (
    DecodeStats,
    DraftTree,
    LookaheadConfig,
    LookaheadWindow,
    ModelRunner,
    NGramPool,
    Verdict,
    build_step_inputs,
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


def lade_first_row(prompt: Sequence[int], window_size: int, ngram_size: int) -> torch.Tensor:
    """LADE's first window row: the current token's slot then W+N-3 random prompt tokens.

    Returns:
        (1, W+N-2) long tensor; cell (0, 0) is overwritten with the current token by each step.
    """
    rng = random.Random(LADE_SEED)
    width = window_size + ngram_size - 3
    return torch.tensor([[prompt[-1]] + [rng.choice(list(prompt)) for _ in range(width)]], dtype=torch.long)


class LadeWindow(LookaheadWindow):
    """LADE's lookahead window: one random row that grows to (N-1, W), then slides like ladref's.

    Fill steps (fewer than N-1 rows) keep every row, the new one included, and drop the first
    column; they harvest nothing. Once full, the window is a `LookaheadWindow`, whose step count
    (fill steps included) decides when harvesting starts: at step N-1, as in ladref.
    """

    def start(self, prompt: Sequence[int]) -> None:
        self.grid = lade_first_row(prompt, self.window_size, self.ngram_size)
        self.steps = 0

    def advance(self, fed: torch.Tensor, new_row: torch.Tensor) -> torch.Tensor | None:
        if self.grid.shape[0] == self.ngram_size - 1:
            return super().advance(fed, new_row)
        self.grid = torch.cat([fed.view_as(self.grid), new_row[None]])[:, 1:]  # one row more, one column less
        self.steps += 1
        return None


def lade_verify(chains: DraftTree, root_pred: int, node_preds: torch.Tensor, limit: int) -> Verdict:
    """LADE's accept rule over separate chains: the first chain with the most tokens greedy agrees with.

    `ladref.verify.verify_greedy` walks a trie and steps into the FIRST child that matches. On
    separate chains two candidates may share their first tokens, and that walk would stay in the
    first of them even when a later one matches further. LADE checks every candidate on its own
    and keeps the first longest match (``if gg > max_hit``), so the mimic does the same.

    Args:
        chains: candidates laid out by `DraftTree.chains` (n nodes).
        root_pred: y_1, the model's argmax after the current token.
        node_preds: (n,) the model's argmax after each node.
        limit: most candidate tokens accepted (LADE: N-2; ladref: N-1).

    Returns:
        The `Verdict`: the matched tokens of the chosen chain, then the model's next token.
    """
    tokens, preds = chains.tokens.tolist(), node_preds.tolist()
    best: list[int] = []
    for node in chains.children.get(-1, []):  # the first node of each chain
        path, target = [], root_pred
        while node is not None and len(path) < limit and tokens[node] == target:
            path.append(node)
            target = preds[node]
            node = next(iter(chains.children.get(node, [])), None)
        best = path if len(path) > len(best) else best
    next_token = preds[best[-1]] if best else root_pred
    return Verdict(torch.tensor([tokens[i] for i in best] + [next_token]), best)


def mimic_step(runner: ModelRunner, window: LookaheadWindow, pool: NGramPool, current: int, config: LookaheadConfig,
               choices: LadeChoices) -> tuple[list[int], int]:
    """One step: ladref's combined step (`ladref.step.draft_step`) with LADE's layout, fill phase and accept rule.

    Args:
        runner: model and KV cache; the cache holds everything before `current`.
        window: `LookaheadWindow` or `LadeWindow`, advanced in place.
        pool: the n-gram pool, harvested in place.
        current: the last accepted token.
        config: W, N, G.
        choices: which LADE choices to copy.

    Returns:
        (accepted tokens, tokens fed to the model).
    """
    past, N = runner.past_len, config.ngram_size
    # 1. Candidates: up to G pool n-grams that start with the current token (none while LADE's
    #    window fills), as G separate chains: LADE feeds every candidate's N-1 tokens, shared
    #    prefixes included, and the tokens fed per step are compared with LADE's.
    full = window.grid.shape[0] == N - 1
    chains = DraftTree.chains(pool.candidates(current, config.max_candidates).tolist() if full else [], "lookahead")
    # 2. One forward pass over the window and the chains under the combined mask.
    step = build_step_inputs(current, window.grid, chains, past)
    layout, width = step.layout, window.grid.shape[1]
    keep = torch.cat([torch.tensor([0]), layout.last_row_index(), layout.tree_index()])
    preds = runner.forward(step.input_ids, step.position_ids, step.allowed, keep).argmax(dim=-1).cpu()
    # 3. Harvest the window's columns once they are the model's, then slide (or grow) the window.
    harvest = window.advance(step.input_ids[: layout.lookahead_len], preds[1 : width + 1])
    if harvest is not None:
        pool.harvest(harvest[:-1], harvest[-1])
    # 4. Verify with LADE's rule, capped at N-2 candidate tokens if asked.
    verdict = lade_verify(chains, int(preds[0]), preds[width + 1 :], N - 2 if choices.cap_full_match else N - 1)
    # 5. Commit the current token and the accepted chain's tokens to the KV cache.
    runner.commit(past, torch.cat([torch.tensor([0]), layout.tree_index()[verdict.path]]))
    return verdict.tokens.tolist(), layout.length


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
    window = (LadeWindow if choices.seed_window else LookaheadWindow)(config.window_size, config.ngram_size)
    window.start(prompt)
    pool = NGramPool(config.ngram_size, config.capacity)
    if config.pool_from_prompt:
        pool.seed_from_tokens(prompt)
    current = runner.prefill(torch.tensor(prompt, dtype=torch.long), DecodeStats())
    tokens, fed = [], []
    while len(tokens) < max_new_tokens and (not tokens or tokens[-1] != eos_token_id):
        accepted, width = mimic_step(runner, window, pool, current, config, choices)
        fed.append(width)
        for token in accepted:
            tokens.append(token)
            if token == eos_token_id or len(tokens) == max_new_tokens:
                break
        current = accepted[-1]
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
    return MimicResult(tokens, len(fed), fed, time.perf_counter() - start)
