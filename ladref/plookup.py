"""Transformers' prompt-lookup decoding as a peer baseline, returning a ladref `DecodeResult`.

``model.generate(..., prompt_lookup_num_tokens=k, do_sample=False)`` drafts up to k tokens by
matching the last n-gram of the text against the prompt (and the output so far) and verifies
them in one forward pass; like lookahead decoding it reproduces greedy output (up to floating
point ties), with no extra model.

Step counting: generate's loop is not ours, so we count its forward calls with a forward
pre-hook on the model (public `torch.nn.Module` API, removed afterwards). The hook reads each
call's input width and the KV-cache length before it, which gives exactly what ladref's own
decoders record: the tokens fed per step and the tokens accepted per step. The first call
processes the whole prompt; we book its first L-1 tokens as prefill (as ladref does) and the
rest as step 1, so greedy-like generation counts one step per token.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

from .common import check_budget, eos_ids, prompt_ids, sync
from .results import DecodeResult, DecodeStats


class _CallRecorder:
    """Forward pre-hook recording (cache length before the call, input width) per model call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("prompt lookup: could not read the input ids of a forward call")
        cache = kwargs.get("past_key_values")
        past = int(cache.get_seq_length()) if cache is not None else 0
        self.calls.append((past, int(ids.shape[-1])))


def _stats_from_calls(calls: list[tuple[int, int]], prompt_len: int, generated: int) -> DecodeStats:
    """Turn (cache length, width) per forward call into ladref's per-step statistics."""
    stats = DecodeStats(prefill_tokens=prompt_len - 1)
    starts = [max(past, prompt_len - 1) for past, _ in calls]
    for i, (past, width) in enumerate(calls):
        end = starts[i + 1] if i + 1 < len(calls) else prompt_len - 1 + generated
        stats.record(end - starts[i], past + width - starts[i])
    return stats


@torch.inference_mode()
def prompt_lookup_decode(
    model: torch.nn.Module,
    input_ids: object,
    max_new_tokens: int = 64,
    *,
    num_tokens: int = 10,
    max_ngram: int = 2,
    eos_token_id: int | Iterable[int] | None = None,
    tokenizer: object = None,
) -> DecodeResult:
    """Greedy prompt-lookup decoding through ``model.generate``.

    Args:
        model: a transformers causal LM.
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        num_tokens: k, most drafted tokens per step (``prompt_lookup_num_tokens``).
        max_ngram: longest n-gram matched against the prompt (``max_matching_ngram_size``).
        eos_token_id: id(s) to stop at (kept in the output); default: the model's.
        tokenizer: optional, to decode the text.

    Returns:
        `DecodeResult` with method "plookup"; steps are generate's forward calls (see module doc).
    """
    for name, value in (("num_tokens", num_tokens), ("max_ngram", max_ngram)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    start = time.perf_counter()
    prompt = prompt_ids(model, input_ids)
    check_budget(model, prompt.shape[0], max_new_tokens, num_tokens)
    eos = sorted(eos_ids(model, eos_token_id, tokenizer))
    device = next(model.parameters()).device
    ids = prompt[None].to(device)
    recorder = _CallRecorder()
    handle = model.register_forward_pre_hook(recorder, with_kwargs=True)
    try:
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            prompt_lookup_num_tokens=num_tokens,
            max_matching_ngram_size=max_ngram,
            eos_token_id=eos or None,
            pad_token_id=eos[0] if eos else 0,
        )
    finally:
        handle.remove()
    tokens = out[0, prompt.shape[0]:].tolist()
    if eos:  # generate stops at the first EOS; drop any padding after it
        first = next((i for i, t in enumerate(tokens) if t in eos), None)
        tokens = tokens if first is None else tokens[: first + 1]
    stats = _stats_from_calls(recorder.calls, prompt.shape[0], len(tokens))
    sync(device)
    stats.wall_time_s = time.perf_counter() - start
    text = tokenizer.decode(tokens, skip_special_tokens=True) if tokenizer is not None else None
    return DecodeResult(tokens, text, stats, "plookup")
