"""`draft_decode`: decoding with any draft sources, the one loop every tree decoder shares.

`lookahead_decode`, `jacobi_decode`, `prompt_lookup_decode`, `recycling_decode` and `suffix_decode`
(`ladref.decoders.methods`) are this loop with their own proposer; `draft_decode` takes yours (or
several: their trees are merged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from typing_extensions import Unpack

from ..call import DecodeCall
from ..config import check_int
from ..facts import ModelFacts
from ..options import DecodeOptions, accept
from ..proposer import MAX_DRAFT_DEPTH, Proposer, check_proposers, step_needs
from ..results import BatchResult, DecodeResult
from ..batched.loop import decode_batch
from ..batched.sample import BatchSampler
from ..batched.source import BatchChoice, FeedAll
from ..batched.sources import batched_sources
from ..rows import decode_prompts
from ..runner import Runner
from ..sampling import chooser_for
from ..step import DraftBudget, StepChoice, run_drafting
from ..types import Budget, Prompts, TokenIds


@torch.inference_mode()
def decode_with_proposers(
    model: torch.nn.Module,
    input_ids: TokenIds,
    max_new_tokens: int,
    proposers: Proposer | Sequence[Proposer],
    method: str,
    extent: int,
    options: DecodeOptions,
    draft_budget: int | None = None,
    choice: Callable[[Runner], StepChoice] | None = None,
    batch_choice: Callable[[int], BatchChoice] | None = None,
) -> DecodeResult | BatchResult:
    """Check the arguments, then run `ladref.step.run_drafting` in one `DecodeCall` for one prompt, or
    the batched step for a batch (`ladref.batched.loop.decode_batch`, the proposers in their batch
    forms: `ladref.batched.sources.batched_sources`).

    Args:
        proposers: the draft sources.
        method: the result's `DecodeResult.method`.
        extent: the deepest draft, checked with the window's reach against the model's context
            before any work (`ladref.proposer.step_needs`); deeper draft nodes are cut from one
            prompt's trees at every step (and from a batch's row-by-row proposers' trees).
        options: the shared keywords (`ladref.options.DecodeOptions`), checked by the caller.
        draft_budget: most draft tokens fed per step; None: all.
        choice: makes one prompt's `ladref.step.StepChoice` from its runner; default `DraftBudget(draft_budget)`.
        batch_choice: makes a batch's `ladref.batched.source.BatchChoice` from its rows; default
            `ladref.batched.source.FeedAll(draft_budget)`.

    The other arguments are those of `draft_decode`.
    """
    proposers = check_proposers(proposers)
    if draft_budget is not None:
        check_int("draft_budget", draft_budget, 1)
    reach = step_needs(proposers, extent).reach

    def one(prompt: TokenIds, new_tokens: int, options: DecodeOptions) -> DecodeResult:
        chooser = chooser_for(options)
        call = DecodeCall.begin(model, prompt, new_tokens, reach, options)
        run_drafting(call.runner, call.prompt, proposers, call.sink, call.stats, chooser, call.position_limit,
                     DraftBudget(draft_budget) if choice is None else choice(call.runner), extent)
        return call.finish(method)

    def many(prompts: list[TokenIds], budgets: list[int], options: DecodeOptions) -> BatchResult:
        chooser_for(options)  # the sampling keywords, checked before any forward pass
        sampler = BatchSampler.from_options(options, ModelFacts.of(model).device)
        own = FeedAll(draft_budget) if batch_choice is None else batch_choice(len(prompts))
        return decode_batch(model, prompts, budgets, options, method, batched_sources(proposers, extent, ModelFacts.of(model).vocab_size), own, sampler, reach,
                            processor=options.get("logits_processor"))

    return decode_prompts(input_ids, max_new_tokens, options, one, many)


def draft_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    proposers: Proposer | Sequence[Proposer],
    draft_budget: int | None = None,
    max_depth: int = MAX_DRAFT_DEPTH,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Speculative decoding with your own draft sources; greedy output identical to `greedy_decode`.

    Each step merges every proposer's `DraftTree` into one trie, feeds it (with a proposer's
    lookahead window, if one brings it) in one forward pass and accepts the longest path greedy
    decoding agrees with, plus one token (`ladref.step`).

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        proposers: a `ladref.Proposer` or a sequence of them.
        draft_budget: most draft tokens fed per step (the merged tree's first nodes); None: all.
        max_depth: the deepest draft fed, checked with the prompt and budget against the model's
            context before any work. A proposer may draft deeper: the nodes past `max_depth` are
            cut from its tree at every step, so a step verifies at most `max_depth` draft tokens
            on any path and accepts at most ``max_depth + 1`` tokens; the output is unchanged
            (still greedy's). In a batch, a proposer run row by row (yours:
            `ladref.batched.sources.rows.RowProposers`) is cut the same way; ladref's own sources
            run in their tensor forms at their own depth. 0: no drafts.
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult` with method "draft"; ``stats.accepted_by_source`` tells whose drafts got accepted.
    """
    accept("draft_decode", options, DecodeOptions)
    check_int("max_depth", max_depth, 0)
    return decode_with_proposers(model, input_ids, max_new_tokens, proposers, "draft", max_depth, options, draft_budget)
