"""Greedy decoding, the oracle every other decoder must reproduce token for token."""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from .call import DecodeCall, TokenSink
from .options import GreedyOptions, accept
from .results import DecodeResult, DecodeStats
from .runner import Runner
from .types import TokenIds


def run_greedy(runner: Runner, prompt: torch.Tensor, sink: TokenSink, stats: DecodeStats) -> None:
    """One token per forward pass, the argmax, until `sink` is done; computed as generate() does.

    The whole prompt goes in one pass whose last logits give the first token (`prefill_whole`),
    then each pass feeds the last token under the model's own causal mask: the same split of the
    computation as transformers' ``generate(do_sample=False)``, so that in float16 / bfloat16
    the oracle also rounds as generate() rounds.

    Args:
        runner: a `ModelRunner`, or a `StaticRunner` (the compiled greedy baseline).
        prompt: (L,) prompt ids.
        sink: collects the tokens and decides when to stop.
        stats: filled in place; the prompt pass counts as step 1 (it yields token 1).
    """
    logits = runner.prefill_whole(prompt, stats)  # (V,)
    while True:
        current = int(logits.argmax())
        stats.record(sink.extend([current]), 1)
        if sink.done:
            return
        logits = runner.forward(torch.tensor([current]))[-1]  # (V,)


@torch.inference_mode()
def greedy_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    **options: Unpack[GreedyOptions],
) -> DecodeResult:
    """Decode one token per forward pass, always taking the argmax.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        **options: the shared keywords but sampling (`ladref.options.GreedyOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``attention_backend``.

    Returns:
        `DecodeResult` with one step per generated token (S = 1).
    """
    call = DecodeCall.begin(model, input_ids, max_new_tokens, 0, accept("greedy_decode", options, GreedyOptions))
    run_greedy(call.runner, call.prompt, call.sink, call.stats)
    return call.finish("greedy")
