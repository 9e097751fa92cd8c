"""A batch's prompts and per-row arguments, and the split every decoder makes: one prompt or a batch.

`decode_prompts` hands one prompt (a list of ints, a (L,) tensor or a (1, L) tensor, with or without
its attention mask) to a decoder's one-prompt loop and a batch (a list of prompts, or a (B, L)
tensor with B > 1 and its attention mask) to the batched step, `ladref.batched`, which decodes
every row at once as one tensor program.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .results import BatchResult, DecodeResult
from .types import TokenIds


def cut_to_mask(row: torch.Tensor, keep: torch.Tensor, label: str) -> torch.Tensor:
    """`row`'s tokens where `keep` is nonzero: its padding dropped.

    Args:
        row: (L,) ids.
        keep: (L,) attention mask, 1 (or any nonzero value) for a token, 0 for padding.
        label: the mask's name in an error ("attention_mask row 2").

    Raises:
        ValueError: padding between tokens (only the left or the right end may be padded).
    """
    where = keep.bool().nonzero().flatten()
    if len(where) and where[-1] - where[0] + 1 != len(where):
        raise ValueError(f"{label} has padding between tokens; pad on the left or on the right only")
    return row[where.to(row.device)]


def check_mask(input_ids: torch.Tensor, attention_mask: object) -> torch.Tensor:
    """`attention_mask` if it is a tensor of `input_ids`' shape, else a clear ValueError."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(input_ids.shape)}, got {shape}")
    return attention_mask


def one_prompt(input_ids: TokenIds, attention_mask: object = None) -> TokenIds:
    """One prompt without its padding: a (L,) or (1, L) tensor cut to its `attention_mask`.

    What a tokenizer returns for one text (``tok(text, return_tensors="pt")``: a (1, L) tensor and
    its (1, L) mask) is one prompt, decoded as a plain (L,) one; positions where the mask is 0
    (padding on the left or on the right) are dropped. Without a mask, `input_ids` is returned as given.

    Args:
        input_ids: the prompt (checked later, by `ladref.call.prompt_ids`).
        attention_mask: a tensor of `input_ids`' shape, or None.

    Raises:
        TypeError: a mask with a prompt that is not a tensor.
        ValueError: a mask of another shape, or with padding between tokens.
    """
    if attention_mask is None:
        return input_ids
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError("attention_mask goes with a (B, L) tensor of prompts, or with a (L,) or (1, L) one; "
                        "a list of ints is one whole prompt and needs none")
    if input_ids.dim() not in (1, 2):
        return input_ids  # refused with its shape by `ladref.call.prompt_ids`
    return cut_to_mask(input_ids.reshape(-1), check_mask(input_ids, attention_mask).reshape(-1), "attention_mask")


def batch_prompts(input_ids: object, attention_mask: object = None) -> list[TokenIds] | None:
    """The prompts of a batch (a list of prompts, or a (B, L) tensor with B > 1), or None for one prompt.

    A (B, L) tensor's rows are cut to their `attention_mask` (1: a token, 0: padding, on the left
    or on the right); without one, every row is a whole prompt. A (1, L) tensor is one prompt,
    mask or not (`one_prompt`).

    Raises:
        ValueError: a mask with a list of prompts, of another shape, or with holes inside a row.
    """
    if isinstance(input_ids, (list, tuple)) and input_ids and all(isinstance(p, (list, tuple, torch.Tensor)) for p in input_ids):
        if attention_mask is not None:
            raise ValueError("attention_mask goes with a (B, L) tensor; a list of prompts needs none (rows may differ in length)")
        return list(input_ids)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] == 1:
        return None
    if attention_mask is None:
        return list(input_ids)
    mask = check_mask(input_ids, attention_mask)
    return [cut_to_mask(row, keep, f"attention_mask row {b}") for b, (row, keep) in enumerate(zip(input_ids, mask))]


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

    A batch is a list of prompts or a (B, L) tensor with B > 1 (`batch_prompts`); its rows are decoded
    together by the batched step (`ladref.batched`), each with its own budget. One prompt, a (1, L)
    tensor included, is cut to its ``attention_mask`` if one is given (`one_prompt`).

    Raises:
        ValueError: an empty batch, budgets of another length, or a streamer with a batch of several
            rows (a batch of one row streams: `ladref.batched.stream.RowStream`).
    """
    prompts = batch_prompts(input_ids, options.get("attention_mask"))
    rest = {k: v for k, v in options.items() if k != "attention_mask"}
    if prompts is None:
        return one(one_prompt(input_ids, options.get("attention_mask")), max_new_tokens, rest)
    if not prompts:
        raise ValueError("the batch is empty")
    if options.get("streamer") is not None and len(prompts) > 1:
        raise ValueError("a streamer follows one sequence; decode a batch of several rows without one")
    return many(prompts, per_row("max_new_tokens", max_new_tokens, len(prompts)), rest)
