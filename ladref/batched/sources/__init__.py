"""The batch forms of ladref's draft sources (`ladref.batched.source.BatchSource`), one file each.

* `jacobi`: Jacobi decoding's (B, m) guess;
* `lookup`: prompt lookup over the device-resident (B, X) text (`unfold`, `argmax`);
* `lookahead` and `pool`: the (B, N-1, W) window and the n-gram pool as device tensors;
* `recycling`: Token Recycling's adjacency matrix and static template, gathered for every row;
* `rows`: any `ladref.Proposer`, each row's copy called on the host once a step (suffix decoding
  among them: its trie lives on the host, `suffix`).

`batched_sources` turns the proposers a decoder was given into these.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...proposer import Proposer
from ..source import BatchSource


def batched_source(proposer: Proposer, max_depth: int, vocab_size: int) -> BatchSource:
    """The batch form of one (checked) proposer: ladref's own sources their tensor forms, any other
    proposer (suffix decoding's, a user's) through `RowProposers` on the host, at most `max_depth` deep."""
    from ...sources.jacobi import JacobiProposer
    from ...sources.lookahead import LookaheadProposer
    from ...sources.prompt_lookup import PromptLookupProposer
    from ...sources.recycling import RecyclingProposer
    from ...sources.suffix import SuffixProposer

    kind = type(proposer)
    if kind is JacobiProposer:
        from .jacobi import BatchJacobi

        return BatchJacobi(proposer.block_size)
    if kind is PromptLookupProposer:
        from .lookup import BatchPromptLookup

        if proposer.memory is not None:
            proposer.memory.bind(vocab_size)  # a memory of another model's tokens is refused
        return BatchPromptLookup(proposer.draft_len, proposer.max_ngram, proposer.min_ngram, proposer.max_matches, proposer.memory)
    if kind is LookaheadProposer:
        from .lookahead import BatchLookahead

        return BatchLookahead(proposer.config, vocab_size)
    if kind is RecyclingProposer:
        from .recycling import BatchRecycling

        return BatchRecycling.from_proposer(proposer)
    from .rows import RowProposers
    from .suffix import batched_suffix

    return batched_suffix(proposer, vocab_size) if kind is SuffixProposer else RowProposers([proposer], max_depth, vocab_size)


def batched_sources(proposers: Sequence[Proposer], max_depth: int, vocab_size: int) -> list[BatchSource]:
    """`batched_source` of each proposer, in order (fresh state for one batch); `vocab_size` bounds a
    host proposer's drafts."""
    return [batched_source(p, max_depth, vocab_size) for p in proposers]
