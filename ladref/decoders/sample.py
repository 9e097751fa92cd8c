"""`sample_decode`: ordinary sampling, one token a pass, the distribution lookahead sampling keeps.

One prompt runs the reference loop below; a batch runs the batched engine (`ladref.batched`).
"""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from ..batched.loop import decode_batch
from ..batched.sample import BatchSampler
from ..call import DecodeCall
from ..facts import ModelFacts
from ..options import DecodeOptions, accept
from ..results import BatchResult, DecodeResult
from ..rows import decode_prompts
from ..sampling import chooser_for
from ..types import Budget, Prompts, TokenIds


@torch.inference_mode()
def sample_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Ordinary sampling, one token per forward pass: the distribution lookahead sampling must keep.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``temperature``, ``top_k``,
            ``top_p``, ``generator``, ``logits_processor``, ``eos_token_id``, ``tokenizer``, ``streamer``,
            ``attention_backend``; ``do_sample`` is implied (False is refused).

    Returns:
        `DecodeResult` with one step per generated token.
    """
    accept("sample_decode", options, DecodeOptions)
    if options.get("do_sample", True) is not True:
        raise ValueError("sample_decode always samples; for the argmax, call greedy_decode")
    chooser_for({**options, "do_sample": True})  # the sampling keywords, checked before any row starts

    def one(prompt: TokenIds, new_tokens: int, options: DecodeOptions) -> DecodeResult:
        chooser = chooser_for({**options, "do_sample": True})
        call = DecodeCall.begin(model, prompt, new_tokens, 0, options)
        current = call.runner.prefill(call.prompt, call.stats, defer=True)  # cached in the first pass
        context = call.prompt.tolist()  # what a logits processor sees: the prompt, then every kept token
        while not call.sink.done:
            logits = call.runner.forward(torch.tensor([current]))  # (1, V)
            current = chooser.choose(context, logits[-1], ())
            context.append(current)
            call.stats.record(call.sink.extend([current]), 1)
        return call.finish("sample")

    def many(prompts: list[TokenIds], budgets: list[int], options: DecodeOptions) -> BatchResult:
        sampler = BatchSampler.from_options({**options, "do_sample": True}, ModelFacts.of(model).device)
        return decode_batch(model, prompts, budgets, options, "sample", sampler=sampler, processor=options.get("logits_processor"))

    return decode_prompts(input_ids, max_new_tokens, options, one, many)
