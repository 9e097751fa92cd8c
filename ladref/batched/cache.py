"""The KV cache of a batch: one padded cache for every row, and which of its slots each row holds.

All rows share one (B, H, T, D) cache. A pass writes every row's step at the same slots, the
*frontier* T .. T + Q - 1; a row's committed tokens are the slots its ``slots`` flags hold, not
necessarily the first ones, and its attention mask hides every other slot. So:

* a prompt shorter than the longest leaves unused slots after it (a hole, hidden), as a left- or
  right-padded batch does in transformers' ``generate``;
* a greedy step's single entry is already where it belongs: no row moves anything;
* a drafting step keeps its current token's entry in place and moves its accepted draft
  entries, in path order, to the slots right after it (`ragged_commit_plan`: index tensors, one
  row of moves per row, nothing read back to the host); the frontier then moves past the row
  that kept the most, and the rows that kept fewer leave a hole behind.

Positions are explicit (each row's own count of tokens), so holes change nothing a row computes:
its queries see exactly its committed tokens, as in its batch-1 step. The host knows the
frontier and the pass's width, Q; the loop learns how far the frontier moves in its one read a
step (`ladref.batched.loop`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..facts import ModelFacts
from ..head import batch_forward
from ..hf_internals import DynamicCache, move_row_slots, new_cache, stack_caches, trim_cache
from ..kernels import attention_scope
from ..runner import ModelRunner


def ragged_commit_plan(frontier: int, entries: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The moves that commit each row's accepted step entries, as (B, K) index tensors.

    Row b's step was written at slots ``frontier ..``; it keeps its first ``counts[b]`` entries of
    ``entries[b]`` (step-relative indices in path order, the current token's 0 first), moved to
    slots ``frontier, frontier + 1, ...``. A column past a row's count moves its slot onto itself:
    no row's kept entry goes there (its targets stop before it), so every row has K moves.

    Args:
        frontier: T, the slot of every row's first step entry.
        entries: (B, K) long, each row's kept step entries in path order (entries[b, 0] = 0).
        counts: (B,) long, 1 <= counts[b] <= K.

    Returns:
        sources, targets: (B, K) long slots: row b's entry at ``sources[b, j]`` goes to ``targets[b, j]``.
    """
    k = torch.arange(entries.shape[1], device=entries.device)
    targets = (frontier + k).expand_as(entries)
    return torch.where(k < counts[:, None], frontier + entries, targets), targets


def prompt_caches(model: torch.nn.Module, facts: ModelFacts, prompts: Sequence[torch.Tensor],
                  attention_backend: str) -> list[DynamicCache | None]:
    """Each prompt but its last token cached alone, eagerly (None for a one-token prompt): a batch's prefill."""
    caches, none = [], torch.zeros(0, dtype=torch.long)
    for prompt in prompts:
        if prompt.shape[0] < 2:
            caches.append(None)
            continue
        runner = ModelRunner(model, attention_backend, facts)
        runner.forward(prompt[:-1], keep=none)
        caches.append(runner.cache)
    return caches


class BatchCache:
    """One padded KV cache for B rows, each row's committed slots marked in an additive bias.

    Args:
        model: the checked model; facts: its `ModelFacts`; kernels: the SDPA kernels of every pass.
        rows: B.

    Attributes:
        frontier: T, the slots in use (the next pass writes at T ..), known to the host.
        bias: (B, C) in the model's dtype, C >= T: 0 at the slots holding row b's committed tokens,
            the dtype's lowest value elsewhere (the cache part of every pass's additive mask).
    """

    def __init__(self, model: torch.nn.Module, facts: ModelFacts, kernels: object, rows: int) -> None:
        self.model, self.facts, self.kernels = model, facts, kernels
        self.cache, self.frontier, self.low = new_cache(model.config), 0, torch.finfo(facts.dtype).min
        self.bias = torch.full((rows, 64), self.low, dtype=facts.dtype, device=facts.device)

    def prefill(self, prompts: Sequence[torch.Tensor], attention_backend: str) -> None:
        """Cache each row's prompt but its last token (the first step's input), each prompt alone,
        then stacked (padded to the longest: prompts differ most in length, and a pass padded to
        the longest would make the short ones pay for it)."""
        stack_caches(self.cache, prompt_caches(self.model, self.facts, prompts, attention_backend))
        lengths = torch.tensor([p.shape[0] - 1 for p in prompts], device=self.facts.device)
        self.frontier = int(max(p.shape[0] for p in prompts)) - 1
        self._room(self.frontier + 1)
        self.bias[:, : self.frontier].masked_fill_(torch.arange(self.frontier, device=self.facts.device) < lengths[:, None], 0)

    def _room(self, length: int) -> None:
        """Make ``bias`` hold at least `length` slots (hidden where new)."""
        if self.bias.shape[1] < length:
            more = max(length - self.bias.shape[1], self.bias.shape[1])
            self.bias = torch.cat([self.bias, self.bias.new_full((self.bias.shape[0], more), self.low)], dim=1)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None,
                keep: torch.Tensor) -> torch.Tensor:
        """One pass of every row's step at the frontier.

        Args:
            input_ids: (B, Q) long, every row's step tokens.
            position_ids: (B, Q) long, their positions (each row's own count of tokens).
            allowed: (B, Q, Q) bool, who sees whom within the step; None for a one-token step
                (its token is committed whatever it predicts: its slot is marked at once).
            keep: (k,) long, the step positions whose logits are wanted (the same for every row).

        Returns:
            (B, k, V) logits in float32 (float64 for a float64 model).
        """
        rows, q = input_ids.shape
        t = self.frontier
        self._room(t + q)
        if allowed is None:
            self.bias[:, t] = 0
            mask = self.bias[:, None, None, : t + 1]
        else:
            step = torch.zeros(allowed.shape, dtype=self.bias.dtype, device=allowed.device).masked_fill_(~allowed, self.low)
            mask = torch.cat([self.bias[:, None, :t].expand(rows, q, t), step], dim=-1)[:, None]  # (B, 1, Q, T + Q)
        with attention_scope(self.kernels):
            return batch_forward(self.model, self.facts, self.cache, input_ids, position_ids, mask, keep)

    def commit(self, entries: torch.Tensor, counts: torch.Tensor) -> None:
        """Keep each row's accepted step entries (`ragged_commit_plan`) and mark their slots.

        Args:
            entries: (B, K) long step-relative entries in path order; counts: (B,) long, how many are kept.
        """
        t, k = self.frontier, entries.shape[1]
        if k > 1:  # one entry a row (the current token's) is already in place
            move_row_slots(self.cache, *ragged_commit_plan(t, entries, counts))
        self.bias[:, t : t + k].masked_fill_(torch.arange(k, device=counts.device) < counts[:, None], 0)  # the rest stays hidden

    @property
    def attended(self) -> int:
        """The slots a pass attends to: the frontier (what a step is priced at)."""
        return self.frontier

    def commit_one(self) -> None:
        """Keep the entry a one-token pass wrote at the frontier (`BatchStep.run_plain`): the frontier moves past it."""
        self.frontier += 1

    def advance(self, by: int) -> None:
        """Move the frontier past the longest row's committed entries (cutting the rest of the last step)."""
        self.frontier += by
        trim_cache(self.cache, self.frontier)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` ((B',) long indices, in order): finished rows leave the passes."""
        trim_cache(self.cache, self.frontier, keep)
        self.bias = self.bias.index_select(0, keep)
