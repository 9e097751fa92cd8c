"""Suffix decoding in a batch: each row's suffix trie on the host, called once a step for all rows, no thread.

The batch form of `ladref.sources.suffix.SuffixProposer` is `RowProposers` around one copy of the
proposer per row (`BatchSuffix`, made by `batched_suffix`): each row grows its own request trie from its prompt and kept
tokens, and every row drafts from, and records its output into, the proposer's one `SuffixMemory`
(none: the request's own text only). The rows are called in batch order, proposing all before
the pass and learning all after it, so what a row drafts from the memory at a step is the other
rows' output up to the step before: the same at every run, and never what a row decodes.
"""

from __future__ import annotations

from ...sources.suffix import SuffixProposer
from ..forms import BatchForm
from .rows import RowProposers


class BatchSuffix(RowProposers, BatchForm, reference=SuffixProposer):
    """Suffix decoding in a batch: `RowProposers` around a copy of the proposer per row (on the host)."""

    @classmethod
    def from_proposer(cls, proposer: SuffixProposer, max_depth: int, vocab_size: int | None) -> BatchSuffix:
        """`batched_suffix`: a copy per row sharing its memory, at most its ``max_depth`` deep."""
        return batched_suffix(proposer, vocab_size)


def batched_suffix(proposer: SuffixProposer, vocab_size: int | None = None) -> BatchSuffix:
    """`proposer` as a batch source: a copy per row sharing its memory, at most its ``max_depth`` deep.

    Args:
        proposer: the `SuffixProposer` whose settings (and memory) the rows use.
        vocab_size: the model's vocabulary, bound to the memory (a memory that served a model of
            another vocabulary is refused); None: the proposer's own ``vocab_size``.

    Raises:
        TypeError: `proposer` is not a `SuffixProposer`. ValueError: a memory of another vocabulary.
    """
    if not isinstance(proposer, SuffixProposer):
        raise TypeError(f"proposer must be a SuffixProposer, got {type(proposer).__name__}")
    vocab = proposer.vocab_size if vocab_size is None else vocab_size
    if vocab is not None and proposer.memory is not None:
        proposer.memory.bind(vocab)
    return BatchSuffix([proposer], proposer.max_depth, vocab)
