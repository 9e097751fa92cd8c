"""A batch's KV cache of fixed shape: every buffer preallocated, the frontier a tensor on the device.

`ladref.batched.cache.BatchCache` grows with the text and learns how far its frontier moved in
the loop's read; a captured step can do neither (its shapes are fixed, and it reads nothing).
`StaticBatchCache` keeps the same layout (one slot range for every row, each row's committed slots
marked in an additive bias, holes hidden) in buffers of M slots:

* a pass writes its Q tokens at slots ``frontier .. frontier + Q - 1``, the frontier a ()-shaped
  long tensor on the device, and attends over all M slots, the step's own block placed in its
  mask at the frontier (``index_copy_``, a device position);
* a commit moves each row's accepted entries right after its current token's
  (`ragged_commit_plan`, the same moves), marks them, and moves the frontier past the row that
  kept the most: ``frontier += counts.max()``, on the device;
* rows never leave (B keeps its shape): a row that stopped commits nothing (its counts are 0);
* `compact`, run between captured steps when the slots run short, moves every row's committed
  slots to the front, in order; positions are explicit, so nothing a row computes changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ..facts import ModelFacts
from ..head import batch_forward
from ..hf_internals import (compact_static_rows, fill_static_cache, move_row_slots, new_cache, new_static_cache,
                            set_static_length, shared_kv_scope, stack_caches)
from ..kernels import attention_scope
from ..runner import ModelRunner
from .cache import prompt_caches, ragged_commit_plan


class StaticBatchCache:
    """One preallocated KV cache of M slots for B rows; what a row holds is marked in an additive bias.

    Args:
        model: the checked model; facts: its `ModelFacts`; kernels: the SDPA kernels of every pass.
        rows: B; max_length: M, the slots of every row.

    Attributes:
        frontier: () long on the device, T: the next pass writes at slots T ...
        bias: (B, M) in the model's dtype: 0 at the slots holding row b's committed tokens, the
            dtype's lowest value elsewhere.
    """

    def __init__(self, model: torch.nn.Module, facts: ModelFacts, kernels: object, rows: int, max_length: int) -> None:
        # a captured pass leaves its GEMMs to the compiler: not the eager CPU passes' own head and W @ x^T linears
        self.model, self.facts = model, replace(facts, own_head=False, small_linears=False)
        self.kernels, self.max_length = kernels, max_length
        self.cache, self.low = new_static_cache(model, max_length), torch.finfo(facts.dtype).min
        self.bias = torch.full((rows, max_length), self.low, dtype=facts.dtype, device=facts.device)
        self.frontier = torch.zeros((), dtype=torch.long, device=facts.device)

    def prefill(self, prompts: Sequence[torch.Tensor], attention_backend: str) -> None:
        """Start a call: cache each row's prompt but its last token (each prompt alone, eagerly), copy them
        into the buffers (the same buffers every call), and forget what they held before."""
        stacked, probe = new_cache(self.model.config), ModelRunner(self.model, attention_backend, self.facts)
        stack_caches(stacked, prompt_caches(self.model, self.facts, prompts, attention_backend))
        probe.forward(torch.zeros(1, dtype=torch.long), keep=torch.zeros(0, dtype=torch.long))  # one entry a layer: the buffers' shapes
        fill_static_cache(self.cache, stacked, len(prompts), probe.cache)
        lengths = torch.tensor([p.shape[0] - 1 for p in prompts], device=self.facts.device)
        self.bias.fill_(self.low).masked_fill_(torch.arange(self.max_length, device=self.facts.device) < lengths[:, None], 0)
        self.frontier.fill_(int(lengths.max()))

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None,
                keep: torch.Tensor) -> torch.Tensor:
        """One pass of every row's step at the frontier, as `BatchCache.forward` (same arguments and
        result), the mask (B, 1, Q, M) over every slot. Every pass, a one-token one too, attends with
        each key/value head shared by its query heads (`ladref.hf_internals.shared_kv_scope`, as a static
        runner's steps do): compiled, transformers would copy all M slots of every layer once per
        query head (SmolLM2-135M, M = 1408: a compiled greedy step took 45.9 ms so, 31.5 without;
        ``benchmarks/archive/captured_step/captured_specbench_cpu.log``)."""
        rows, q = input_ids.shape
        slots = self.frontier + torch.arange(q, device=input_ids.device)  # (Q,) where the step is written
        if allowed is None:  # one token, committed where it is written
            self.bias.index_fill_(1, slots, 0)
            mask = self.bias[:, None, None, :]
        else:
            step = torch.zeros(allowed.shape, dtype=self.bias.dtype, device=allowed.device).masked_fill_(~allowed, self.low)
            mask = self.bias[:, None, :].expand(rows, q, self.max_length).index_copy(2, slots, step)[:, None]
        set_static_length(self.cache, self.frontier)
        with attention_scope(self.kernels), shared_kv_scope(self.model, self.facts):
            return batch_forward(self.model, self.facts, self.cache, input_ids, position_ids, mask, keep)

    def commit(self, entries: torch.Tensor, counts: torch.Tensor) -> None:
        """Keep each row's first ``counts[b]`` step entries ((B, K) in path order; a count may be 0), mark
        their slots, and move the frontier past the row that kept the most."""
        k = torch.arange(entries.shape[1], device=counts.device)
        source, target = ragged_commit_plan(self.frontier, entries, counts)
        move_row_slots(self.cache, source, target)
        self.bias.scatter_(1, target, self.bias.new_zeros(target.shape).masked_fill_(k >= counts[:, None], self.low))
        self.frontier.add_(counts.max())

    @property
    def attended(self) -> int:
        """The slots a pass attends to: all M of them, the unused masked (a host int, unlike the frontier)."""
        return self.max_length

    def commit_one(self) -> None:
        """Keep the entry a one-token pass wrote at the frontier: the frontier moves past it, in place."""
        self.frontier.add_(1)

    def advance(self, by: int) -> None:
        """Nothing to do: the frontier moved on the device at the commit."""

    def compact(self) -> None:
        """Move every row's committed slots to the front, in order, and the frontier past the longest row's."""
        order = (self.bias != 0).to(torch.int8).argsort(dim=1, stable=True)  # (B, M): committed slots first
        compact_static_rows(self.cache, order)
        held = (self.bias == 0).sum(-1)  # (B,)
        self.bias.fill_(self.low).masked_fill_(torch.arange(self.max_length, device=held.device) < held[:, None], 0)
        self.frontier.copy_(held.max())
