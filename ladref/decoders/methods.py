"""The draft decoders: the shared loop (`ladref.decoders.draft`) with one of ladref's own proposers.

Each is ``decode_with_proposers`` with its source's proposer (`ladref.sources`): one prompt runs the
reference step (`ladref.step`), a batch the batched engine (`ladref.batched`).
"""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from ..compat import reject_old_call_shape
from ..config import LookaheadConfig
from ..facts import ModelFacts
from ..options import DecodeOptions, accept
from ..results import BatchResult, DecodeResult
from ..sources.jacobi import JacobiProposer
from ..sources.lookahead import LookaheadProposer
from ..sources.prompt_lookup import PromptLookupProposer
from ..sources.recycling import RecyclingProposer, TreeTemplate
from ..sources.suffix import SuffixProposer
from ..sources.suffix_trie import SuffixMemory
from ..types import Budget, Prompts
from .draft import decode_with_proposers


def jacobi_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    block_size: int = 8,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Jacobi decoding with a KV cache; output identical to `greedy_decode`.

    Each step feeds ``[current, g_1 .. g_m]`` (a chain: one causal sequence), commits the
    converged guesses plus the first exact prediction after them, and shifts the rest of the
    predictions into the next guess (`JacobiProposer`).

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        block_size: m, guessed tokens per iteration (each pass feeds m + 1 tokens).
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult`; `stats.steps` is the number of Jacobi iterations.
    """
    accept("jacobi_decode", options, DecodeOptions)
    return decode_with_proposers(model, input_ids, max_new_tokens, [JacobiProposer(block_size)], "jacobi", block_size, options)


@reject_old_call_shape
def lookahead_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    config: LookaheadConfig | None = None,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Lookahead decoding; greedy output identical to `greedy_decode`, in fewer steps.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        config: W, N, G and pool options; default `LookaheadConfig()`.
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult`; `stats.compression` is the paper's S (tokens per step).
    """
    accept("lookahead_decode", options, DecodeOptions)
    config = LookaheadConfig() if config is None else config
    return decode_with_proposers(model, input_ids, max_new_tokens, [LookaheadProposer(config)], "lookahead",
                                 config.step_extent(), options)


def prompt_lookup_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    draft_len: int = 10,
    max_ngram: int = 3,
    min_ngram: int = 1,
    max_matches: int = 1,
    memory: SuffixMemory | None = None,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Prompt lookup decoding (native); greedy output identical to `greedy_decode`.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        draft_len: most tokens copied after a match (`PromptLookupProposer`).
        max_ngram: longest suffix of the text looked up.
        min_ngram: shortest suffix looked up.
        max_matches: most matches whose continuations are drafted (a tree when > 1).
        memory: a `SuffixMemory` of earlier outputs, searched before each prompt and kept and grown
            by this call (a batch's rows record their outputs when the call ends); None: none.
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult` with method "prompt_lookup".
    """
    proposer = PromptLookupProposer(draft_len, max_ngram, min_ngram, max_matches, memory)
    if memory is not None:
        memory.bind(ModelFacts.of(model).vocab_size)  # a memory of another model's tokens is refused
    accept("prompt_lookup_decode", options, DecodeOptions)
    return decode_with_proposers(model, input_ids, max_new_tokens, [proposer], "prompt_lookup", draft_len, options)


def recycling_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    template: TreeTemplate | None = None,
    topk: int | None = None,
    proposer: RecyclingProposer | None = None,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """Token Recycling; greedy output identical to `greedy_decode`.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        template: the static tree (default `TreeTemplate.best_first()`); ignored with `proposer`.
        topk: k, successors kept per token (default: the template's width); ignored with `proposer`.
        proposer: a `RecyclingProposer` to use (and, with ``warm=True``, to keep learning across
            calls); default: a fresh one, cold, for this call.
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult` with method "recycling".
    """
    accept("recycling_decode", options, DecodeOptions)
    vocab = ModelFacts.of(model).vocab_size
    if proposer is None:
        proposer = RecyclingProposer(vocab, template=template, topk=topk)
    elif not isinstance(proposer, RecyclingProposer):
        raise TypeError(f"proposer must be a RecyclingProposer, got {type(proposer).__name__}")
    elif proposer.adjacency.shape[0] != vocab:
        raise ValueError(f"the proposer's adjacency has {proposer.adjacency.shape[0]} rows, the model's vocabulary {vocab} tokens")
    return decode_with_proposers(model, input_ids, max_new_tokens, [proposer], "recycling", proposer.template.depth, options)


def suffix_decode(
    model: torch.nn.Module,
    input_ids: Prompts,
    max_new_tokens: Budget = 64,
    *,
    proposer: SuffixProposer | None = None,
    max_depth: int = 12,
    max_nodes: int = 16,
    spec_factor: float = 1.0,
    min_prob: float = 0.1,
    max_match: int = 12,
    memory: SuffixMemory | None = None,
    merge_matches: bool = False,
    **options: Unpack[DecodeOptions],
) -> DecodeResult | BatchResult:
    """SuffixDecoding; greedy output identical to `greedy_decode`.

    With a `memory` (or a `proposer` holding one) the outputs of earlier calls are drafted from
    too. A batch's rows each draft with a copy of the proposer, their own request trie, all sharing
    its memory: once a step every row, in batch order, drafts from it before the pass and records
    its kept tokens into it after (`ladref.batched.sources.suffix`). A row may so draft from another
    row's output of the steps before; what it drafts is the same at every run, and never changes
    what it decodes.

    Args:
        model: a transformers decoder-only model (eager or SDPA attention).
        input_ids: the prompt, (L,) or (1, L) ids or a list of ints; or a batch (`ladref.types.Prompts`).
        max_new_tokens: most tokens to generate (for a batch: one budget, or one per row).
        proposer: a `SuffixProposer` to use (keep one with a memory across calls); the settings
            below are then its own.
        max_depth: the deepest draft (`SuffixProposer`).
        max_nodes: most nodes of a draft tree.
        spec_factor: alpha: a pattern of L tokens drafts at most alpha * L nodes.
        min_prob: the least estimated probability of a drafted node.
        max_match: the longest pattern looked up.
        memory: a `SuffixMemory` of earlier outputs, kept and grown by this call; None: none.
        merge_matches: grow one tree from every matched pattern, not the best pattern's tree alone.
        **options: the shared keywords (`ladref.options.DecodeOptions`): ``eos_token_id``,
            ``tokenizer``, ``streamer``, ``do_sample`` and its settings, ``logits_processor``, ``attention_backend``.

    Returns:
        `DecodeResult` with method "suffix".

    Raises:
        ValueError: a setting out of range, or a memory (a proposer) that served a model with
            another vocabulary, before any forward pass. TypeError: a setting of the wrong type.
    """
    accept("suffix_decode", options, DecodeOptions)
    vocab = ModelFacts.of(model).vocab_size
    if proposer is None:
        proposer = SuffixProposer(max_depth, max_nodes, spec_factor, min_prob, max_match, memory, vocab, merge_matches)
    elif not isinstance(proposer, SuffixProposer):
        raise TypeError(f"proposer must be a SuffixProposer, got {type(proposer).__name__}")
    elif proposer.vocab_size is not None and proposer.vocab_size != vocab:
        raise ValueError(f"the proposer was made for a vocabulary of {proposer.vocab_size} ids, the model's has {vocab}")
    elif proposer.memory is not None:
        proposer.memory.bind(vocab)
    return decode_with_proposers(model, input_ids, max_new_tokens, [proposer], "suffix", proposer.max_depth, options)
