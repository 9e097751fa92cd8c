"""Which batch form a proposer takes: each tensor source names its reference and registers itself.

A draft source is written once per tier: its reference, a `ladref.Proposer` for one prompt
(`ladref.sources`), and its tensor twin for a batch, a `BatchForm` naming that reference in its
class statement::

    class BatchJacobi(BatchForm, reference=JacobiProposer, fixed_shape=True):
        @classmethod
        def from_proposer(cls, proposer, max_depth, vocab_size):
            return cls(proposer.block_size)

That is all the engine needs to know of it: `batch_form` finds the twin of a proposer's type, and
a captured step takes the sources whose drafts keep one shape from step to step (``fixed_shape``).
A proposer with no twin (a user's own, or a subclass of one of ladref's, which may draft
otherwise) runs in a batch on the host, row by row (`ladref.batched.sources.rows.RowProposers`).
"""

from __future__ import annotations

from typing import Any, ClassVar


class BatchForm:
    """The base of a proposer's batch form (a `ladref.batched.source.BatchSource`).

    A subclass names its reference proposer type, and whether its drafts keep one shape from step
    to step, as class keywords (see the module's docstring); a subclass of a form that names no
    reference is a variant of that form and is not registered.

    Attributes:
        reference: the proposer type (`ladref.Proposer`) this is the batch form of.
        fixed_shape: the drafts keep one shape from step to step, and live on the device: a
            captured step (`ladref.batched.captured`) can take the source.
        twins: {reference type: its form}, every form defined so far.
    """

    reference: ClassVar[type]
    fixed_shape: ClassVar[bool] = False
    twins: ClassVar[dict[type, type[BatchForm]]] = {}

    def __init_subclass__(cls, *, reference: type | None = None, fixed_shape: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if reference is None:
            if not hasattr(cls, "reference"):
                raise TypeError(f"{cls.__name__} must name its reference proposer: class {cls.__name__}(BatchForm, reference=...)")
            return
        if not isinstance(reference, type):
            raise TypeError(f"{cls.__name__}: reference must be a proposer class, got {type(reference).__name__}")
        if not isinstance(fixed_shape, bool):
            raise TypeError(f"{cls.__name__}: fixed_shape must be a bool, got {type(fixed_shape).__name__}")
        known = BatchForm.twins.get(reference)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"{reference.__name__} already has a batch form, {known.__module__}.{known.__qualname__}")
        cls.reference, cls.fixed_shape = reference, fixed_shape
        BatchForm.twins[reference] = cls

    @classmethod
    def from_proposer(cls, proposer: Any, max_depth: int, vocab_size: int) -> Any:
        """The batch form of `proposer` (an instance of `reference`), fresh for one batch.

        Args:
            proposer: the reference proposer whose settings (and shared state) the rows use.
            max_depth: the deepest draft the decoder takes.
            vocab_size: V, the model's vocabulary.
        """
        raise NotImplementedError(f"{cls.__name__} must define from_proposer")


def batch_form(proposer: object) -> type[BatchForm] | None:
    """The registered batch form of `proposer`'s exact type, or None (the host runs it row by row)."""
    return BatchForm.twins.get(type(proposer))


def fixed_shape_references() -> list[type]:
    """The proposer types whose forms keep one shape from step to step: what a captured step takes."""
    return [reference for reference, form in BatchForm.twins.items() if form.fixed_shape]
