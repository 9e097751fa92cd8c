"""`draft_decode`: decoding with any draft sources, the one loop every tree decoder shares.

`lookahead_decode`, `jacobi_decode`, `prompt_lookup_decode` and `recycling_decode` are this loop
with their own proposer; `draft_decode` takes yours (or several: their trees are merged).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .call import DecodeCall
from .config import check_int
from .proposer import Proposer, check_proposers, step_needs
from .results import DecodeResult
from .sampling import make_chooser
from .step import DraftBudget, run_drafting
from .types import EosIds, Streamer, TokenIds, Tokenizer


@torch.inference_mode()
def decode_with_proposers(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int,
    proposers: Proposer | Sequence[Proposer],
    method: str,
    extent: int,
    *,
    eos_token_id: EosIds = None,
    tokenizer: Tokenizer | None = None,
    do_sample: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    streamer: Streamer | None = None,
    attention_backend: str = "auto",
    draft_budget: int | None = None,
) -> DecodeResult:
    """Check the arguments, then run `ladref.step.run_drafting` in one `DecodeCall`.

    Args:
        proposers: the draft sources.
        method: the result's `DecodeResult.method`.
        extent: positions past the current token a step may touch, checked against the model's
            context before any work (deeper drafts are also dropped step by step).
        draft_budget: most draft tokens fed per step; None: all.

    The other arguments are those of `draft_decode`.
    """
    proposers = check_proposers(proposers)
    if draft_budget is not None:
        check_int("draft_budget", draft_budget, 1)
    chooser = make_chooser(do_sample, temperature, top_k, top_p, generator)
    extent = max(extent, step_needs(proposers).reach)  # the deepest draft, or the window's reach
    call = DecodeCall.begin(model, input_ids, max_new_tokens, extent, eos_token_id, tokenizer, streamer, attention_backend)
    run_drafting(call.runner, call.prompt, proposers, call.sink, call.stats, chooser, call.position_limit, DraftBudget(draft_budget))
    return call.finish(tokenizer, method)


def draft_decode(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int = 64,
    *,
    proposers: Proposer | Sequence[Proposer],
    eos_token_id: EosIds = None,
    tokenizer: Tokenizer | None = None,
    do_sample: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    streamer: Streamer | None = None,
    attention_backend: str = "auto",
    draft_budget: int | None = None,
    max_depth: int = 16,
) -> DecodeResult:
    """Speculative decoding with your own draft sources; greedy output identical to `greedy_decode`.

    Each step merges every proposer's `DraftTree` into one trie, feeds it (with a proposer's
    lookahead window, if one brings it) in one forward pass and accepts the longest path greedy
    decoding agrees with, plus one token (`ladref.step`).

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints.
        max_new_tokens: most tokens to generate.
        proposers: a `ladref.Proposer` or a sequence of them.
        eos_token_id: id(s) to stop at (kept in the output); default: the model's.
        tokenizer: optional, to decode the text.
        do_sample: sample instead of taking the argmax; the output is distributed exactly as
            ordinary sampling (`ladref.sampling`).
        temperature: sampling temperature (> 0; default 1).
        top_k: keep the k most likely tokens when sampling (None: all).
        top_p: nucleus sampling threshold in (0, 1] (None: off).
        generator: CPU `torch.Generator` making the draws reproducible.
        streamer: optional transformers streamer; gets the prompt, each token in order, then `end()`.
        attention_backend: SDPA kernels the forward passes may use (`ladref.kernels.sdpa_backends`).
        draft_budget: most draft tokens fed per step (the merged tree's first nodes); None: all.
        max_depth: the deepest draft the proposers make, checked against the model's context.

    Returns:
        `DecodeResult` with method "draft"; ``stats.accepted_by_source`` tells whose drafts got accepted.
    """
    check_int("max_depth", max_depth, 0)
    return decode_with_proposers(model, input_ids, max_new_tokens, proposers, "draft", max_depth, eos_token_id=eos_token_id,
                                 tokenizer=tokenizer, do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                                 generator=generator, streamer=streamer, attention_backend=attention_backend,
                                 draft_budget=draft_budget)
