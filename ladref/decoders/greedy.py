"""Greedy decoding, the oracle every other decoder must reproduce token for token."""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from ..call import DecodeCall, TokenSink
from ..options import GreedyOptions, accept
from ..results import BatchResult, DecodeResult, DecodeStats
from ..batched.loop import decode_batch
from ..rows import decode_prompts
from ..runner import Runner
from ..sampling import Chooser, chooser_for
from ..types import Budget, Prompts, TokenIds


def run_greedy(runner: Runner, prompt: torch.Tensor, sink: TokenSink, stats: DecodeStats, chooser: Chooser | None = None) -> None:
    """One token per forward pass, the argmax, until `sink` is done; computed as generate() does.

    The whole prompt goes in one pass whose last logits give the first token (`prefill_whole`),
    then each pass feeds the last token under the model's own causal mask: the same split of the
    computation as transformers' ``generate(do_sample=False)``, so that in float16 / bfloat16
    the oracle also rounds as generate() rounds. (A one-token pass runs the model's own linear
    layers and head: ladref's CPU products start at two rows, `ladref.kernels.SMALL_ROWS`.)

    Args:
        runner: a `ModelRunner`, or a `StaticRunner` (the compiled greedy baseline).
        prompt: (L,) prompt ids.
        sink: collects the tokens and decides when to stop.
        stats: filled in place; the prompt pass counts as step 1 (it yields token 1).
        chooser: None takes the argmax; a `ladref.sampling.GreedyChooser` the argmax after its
            logits processor, each position's context the prompt and the tokens kept before it.
    """
    logits = runner.prefill_whole(prompt, stats)  # (V,)
    context = prompt.tolist()
    while True:
        current = int(logits.argmax()) if chooser is None else chooser.choose(context, logits, ())
        context.append(current)
        stats.record(sink.extend([current]), 1)
        if sink.done:
            return
        logits = runner.forward(torch.tensor([current]))[-1]  # (V,)


@torch.inference_mode()
def greedy_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    **options: Unpack[GreedyOptions],
) -> DecodeResult | BatchResult:
    """Decode one token per forward pass, always taking the argmax.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        **options: the shared keywords but sampling (`ladref.options.GreedyOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``logits_processor`` (the argmax after it), ``attention_backend``.

    Returns:
        `DecodeResult` with one step per generated token (S = 1); a `BatchResult` for a batch.
    """
    accept("greedy_decode", options, GreedyOptions)

    def one(prompt: TokenIds, new_tokens: int, options: GreedyOptions) -> DecodeResult:
        call = DecodeCall.begin(model, prompt, new_tokens, 0, options)
        run_greedy(call.runner, call.prompt, call.sink, call.stats, chooser_for(options))
        return call.finish("greedy")

    return decode_prompts(input_ids, max_new_tokens, options, one,
                          lambda prompts, budgets, options: decode_batch(model, prompts, budgets, options, "greedy",
                                                                         processor=options.get("logits_processor")))
