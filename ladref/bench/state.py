"""Checkpoints of what a benchmark row learns across calls, so that every round of a call starts alike.

A row that learns (a warm Token Recycling matrix, a suffix memory, adaptive decoding's acceptance)
would otherwise meet a prompt's second round knowing the first. `checkpoint` saves the objects'
state outside the timed call and puts it back in place: each object keeps its identity, so the
closures and the other objects that hold it see the restored state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

Save = Callable[[], Callable[[], None]]


def learned(source: object) -> tuple[object, ...]:
    """`source` and, when it has one, its memory (a suffix proposer's copy shares its memory, so the memory
    is saved in its own right)."""
    memory = getattr(source, "memory", None)
    return (source,) if memory is None else (source, memory)


def checkpoint(*objects: object, shared: Sequence[object] = ()) -> Save:
    """``save()`` for what `objects` learn: it copies their state now and returns ``restore()``.

    Args:
        objects: what learns; each is copied on its own (``copy.deepcopy``), the other objects it
            holds and `shared` kept as they are.
        shared: what is never copied (the model).
    """
    if not objects:
        raise ValueError("checkpoint needs at least one object")

    def copies(of: Sequence[object]) -> list[object]:
        return [copy.deepcopy(twin, {id(k): k for k in (*shared, *objects) if k is not obj}) for twin, obj in zip(of, objects)]

    def save() -> Callable[[], None]:
        saved = copies(objects)

        def restore() -> None:
            for obj, twin in zip(objects, copies(saved)):
                obj.__dict__.clear()
                obj.__dict__.update(twin.__dict__)
        return restore
    return save
