"""A batch's prompts and per-row arguments, and the split every decoder makes: one prompt or a batch.

`decode_prompts` hands one prompt to a decoder's one-prompt loop and a batch (a list of prompts,
or a (B, L) tensor with its attention mask) to the batched step, `ladref.batched`, which decodes
every row at once as one tensor program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .results import BatchResult, DecodeResult
from .types import TokenIds


def batch_prompts(input_ids: object, attention_mask: object = None) -> list[TokenIds] | None:
    """The prompts of a batch (a list of prompts, or a (B, L) tensor with B > 1), or None for one prompt.

    A (B, L) tensor's rows are cut to their `attention_mask` (1: a token, 0: padding, on the left
    or on the right); without one, every row is a whole prompt.

    Raises:
        TypeError, ValueError: a mask without a tensor, of another shape, or with holes inside a row.
    """
    if isinstance(input_ids, (list, tuple)) and input_ids and all(isinstance(p, (list, tuple, torch.Tensor)) for p in input_ids):
        if attention_mask is not None:
            raise ValueError("attention_mask goes with a (B, L) tensor; a list of prompts needs none (rows may differ in length)")
        return list(input_ids)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or (input_ids.shape[0] == 1 and attention_mask is None):
        if attention_mask is not None and not isinstance(input_ids, torch.Tensor):
            raise TypeError("attention_mask goes with a (B, L) tensor of prompts")
        return None
    if attention_mask is None:
        return list(input_ids)
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(input_ids.shape)}, got {shape}")
    prompts = []
    for b, (row, keep) in enumerate(zip(input_ids, attention_mask.bool())):
        where = keep.nonzero().flatten()
        if len(where) and where[-1] - where[0] + 1 != len(where):
            raise ValueError(f"attention_mask row {b} has padding between tokens; pad on the left or on the right only")
        prompts.append(row[where])
    return prompts


def per_row(name: str, value: object, rows: int) -> list:
    """`value` for each of `rows` rows: one value for all, or a list of one per row."""
    if isinstance(value, (list, tuple)):
        if len(value) != rows:
            raise ValueError(f"{name} has {len(value)} values for a batch of {rows} prompts")
        return list(value)
    return [value] * rows


def decode_prompts(input_ids: object, max_new_tokens: int | Sequence[int], options: Mapping[str, Any],
                   one: Callable[[TokenIds, int, Mapping[str, Any]], DecodeResult],
                   many: Callable[[list[TokenIds], list[int], Mapping[str, Any]], BatchResult]) -> DecodeResult | BatchResult:
    """``one(prompt, max_new_tokens, options)`` for one prompt; ``many(prompts, budgets, options)`` for a batch.

    A batch is a list of prompts or a (B, L) tensor (`batch_prompts`); its rows are decoded
    together by the batched step (`ladref.batched`), each with its own budget.

    Raises:
        ValueError: an empty batch, budgets of another length, or a streamer with a batch.
    """
    prompts = batch_prompts(input_ids, options.get("attention_mask"))
    rest = {k: v for k, v in options.items() if k != "attention_mask"}
    if prompts is None:
        return one(input_ids, max_new_tokens, rest)
    if not prompts:
        raise ValueError("the batch is empty")
    if options.get("streamer") is not None:
        raise ValueError("a streamer follows one sequence; decode a batch without one")
    return many(prompts, per_row("max_new_tokens", max_new_tokens, len(prompts)), rest)
