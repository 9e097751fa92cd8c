"""Greedy decoding, the oracle every other decoder must reproduce token for token."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .backend import ModelRunner
from .common import DecodeCall
from .results import DecodeResult, DecodeStats


def prefill(runner: ModelRunner, prompt: torch.Tensor, stats: DecodeStats) -> int:
    """Cache the prompt's K/V except its last token, which becomes the first step's input.

    Args:
        prompt: (L,) prompt ids.

    Returns:
        The current token (the prompt's last).
    """
    if prompt.shape[0] > 1:
        runner.forward(prompt[:-1], keep=torch.tensor([0]))
    stats.prefill_tokens = prompt.shape[0] - 1
    return int(prompt[-1])


@torch.inference_mode()
def greedy_decode(
    model: torch.nn.Module,
    input_ids: object,
    max_new_tokens: int = 64,
    *,
    eos_token_id: int | Iterable[int] | None = None,
    tokenizer: object = None,
) -> DecodeResult:
    """Decode one token per forward pass, always taking the argmax.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        eos_token_id: id(s) to stop at (kept in the output); default: the model's.
        tokenizer: optional, to decode the text.

    Returns:
        `DecodeResult` with one step per generated token (S = 1).
    """
    call = DecodeCall.begin(model, input_ids, max_new_tokens, 0, eos_token_id, tokenizer)
    current = prefill(call.runner, call.prompt, call.stats)
    while not call.sink.done:
        logits = call.runner.forward(torch.tensor([current]))  # (1, V)
        current = int(logits[-1].argmax())
        call.stats.record(call.sink.extend([current]), 1)
    return call.finish(tokenizer, "greedy")
