"""Jacobi decoding: guess a block of future tokens and re-predict all of them in one pass.

Greedy decoding is the fixed point y_i = argmax p(y_i | y_<i, x). One Jacobi iteration feeds
``[current, g_1 .. g_m]`` and reads the argmax after each token, ``o_0 .. o_m``. o_0 is exact;
every guess g_i that equals o_{i-1} (with all guesses before it) has converged, and then o_i is
exact too. We commit that converged prefix plus the first exact prediction after it, shift the
rest of the predictions into the next guess, and iterate: at least one token per pass, and the
same tokens as greedy decoding.
"""

from __future__ import annotations

import torch

from .call import DecodeCall
from .config import check_int
from .results import DecodeResult
from .runner import ModelRunner
from .types import EosIds, Streamer, TokenIds, Tokenizer


def jacobi_iteration(runner: ModelRunner, current: int, guess: torch.Tensor) -> torch.Tensor:
    """One parallel forward over ``[current, guess]`` (causal).

    Args:
        current: the last committed token.
        guess: (m,) guessed next tokens.

    Returns:
        (m+1,) predictions: entry i is the argmax after ``[current, g_1..g_i]``.
    """
    ids = torch.cat([torch.tensor([current]), guess])
    return runner.forward(ids).argmax(dim=-1).cpu()


def converged_prefix(guess: torch.Tensor, preds: torch.Tensor) -> int:
    """k = leading guesses equal to the predictions before them (g_i == o_{i-1} for i <= k)."""
    return int((guess == preds[:-1]).long().cumprod(dim=0).sum())


def next_guess(preds: torch.Tensor, k: int, m: int) -> torch.Tensor:
    """The unconverged predictions o_{k+1}.. o_m, padded with the last one to m tokens."""
    rest = preds[k + 1 :]
    if rest.numel() == 0:
        rest = preds[-1:]
    return torch.cat([rest, rest[-1:].expand(m - rest.numel())])


@torch.inference_mode()
def jacobi_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    *,
    block_size: int = 8,
    eos_token_id: EosIds = None,
    tokenizer: Tokenizer | None = None,
    streamer: Streamer | None = None,
    attention_backend: str = "auto",
) -> DecodeResult:
    """Jacobi decoding with a KV cache; output identical to `greedy_decode`.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        block_size: m, guessed tokens per iteration (each pass feeds m + 1 tokens).
        eos_token_id: id(s) to stop at (kept in the output); default: the model's.
        tokenizer: optional, to decode the text.
        streamer: optional transformers streamer; gets the prompt, each token in order, then `end()`.
        attention_backend: SDPA kernels the forward passes may use (`ladref.kernels.sdpa_backends`).

    Returns:
        `DecodeResult`; `stats.steps` is the number of Jacobi iterations.
    """
    check_int("block_size", block_size, 1)
    call = DecodeCall.begin(model, input_ids, max_new_tokens, block_size, eos_token_id, tokenizer, streamer, attention_backend)
    prompt, runner, stats, sink = call.prompt, call.runner, call.stats, call.sink
    current = runner.prefill(prompt, stats)
    guess = prompt[-block_size:].repeat(block_size)[:block_size]  # (m,) initial guess: prompt tail
    while not sink.done:
        past = runner.past_len
        # 1. Re-predict the whole block in one pass.
        preds = jacobi_iteration(runner, current, guess)
        # 2. Commit the converged guesses plus the first exact prediction after them.
        k = converged_prefix(guess, preds)
        stats.record(sink.extend(preds[: k + 1].tolist()), block_size + 1)
        # 3. Keep the K/V of the current token and the k converged guesses; iterate on the rest.
        runner.commit(past, torch.arange(k + 1))
        current, guess = int(preds[k]), next_guess(preds, k, block_size)
    return call.finish(tokenizer, "jacobi")
