"""The batch forms of ladref's draft sources (`ladref.batched.source.BatchSource`), one file each.

* `jacobi`: Jacobi decoding's (B, m) guess;
* `lookup`: prompt lookup over the device-resident (B, X) text (`unfold`, `argmax`);
* `lookahead` and `pool`: the (B, N-1, W) window and the n-gram pool as device tensors;
* `recycling`: Token Recycling's adjacency matrix and static template, gathered for every row;
* `rows`: any `ladref.Proposer`, each row's copy called on the host once a step (suffix decoding
  among them: its trie lives on the host, `suffix`).

Each form names its reference proposer and registers itself (`ladref.batched.forms`); adding one is
one more file here. `batched_sources` turns the proposers a decoder was given into these.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...proposer import Proposer
from ..forms import batch_form, fixed_shape_references
from ..source import BatchSource
from . import jacobi, lookahead, lookup, recycling, suffix  # noqa: F401 - each form registers itself
from .rows import RowProposers

__all__ = ["batch_form", "batched_source", "batched_sources", "fixed_shape_references"]  # the forms: registered


def batched_source(proposer: Proposer, max_depth: int, vocab_size: int) -> BatchSource:
    """The batch form of one (checked) proposer: the registered twin of its type
    (`ladref.batched.forms`), or any other proposer (a user's) through `RowProposers` on the host, at
    most `max_depth` deep."""
    form = batch_form(proposer)
    return RowProposers([proposer], max_depth, vocab_size) if form is None else form.from_proposer(proposer, max_depth, vocab_size)


def batched_sources(proposers: Sequence[Proposer], max_depth: int, vocab_size: int) -> list[BatchSource]:
    """`batched_source` of each proposer, in order (fresh state for one batch); `vocab_size` bounds a
    host proposer's drafts."""
    return [batched_source(p, max_depth, vocab_size) for p in proposers]
