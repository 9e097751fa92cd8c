"""A captured step's state at fixed addresses, reset in place at every call: what CUDA graphs need.

A CUDA graph replays the kernels it recorded on the addresses it recorded. torch.compile's
cudagraph trees ("reduce-overhead") run a graph eagerly, skipping its replay, when it mutates an
input that is neither at a static address nor an earlier graph's output
(``torch/_inductor/cudagraph_utils.py::check_for_mutation``), and a graph's outputs are
overwritten by its next replay. So everything a captured step carries to the next step lives in
tensors that

1. the step updates in place by a tensor method (``copy_``, ``add_``, ``scatter_``), never
   replacing them: the state (`BatchState`), the cache, every source's, the policy's, the noise's
   counter and the next step's plan (`assign`). Not ``x.a += y``: eager that is in place, but
   compiled, Dynamo stores a new tensor at ``x.a``; and
2. are the same tensors at every call of a batch size: a call builds them afresh as ever
   (`BatchState.start`, each source's ``begin``, the policy, the first plan), then
   `Resident.settle` copies each fresh tensor into the one kept at its place since the batch
   size's first call, and puts the kept one there.

The kept tensors are marked static addresses, guarded: a graph that finds another tensor in
their place recompiles (so a compiled test under ``error_on_recompile`` fails on any tensor a step
or a call replaced). Not under "max-autotune": Inductor's freezing would fold a static tensor the
graph only reads into a constant, and a call resets it from outside the graph.
"""

from __future__ import annotations

import dataclasses

import torch

PACKAGE = "ladref.batched"  # the objects whose tensors are settled: the batch's own (not the model, the memory of outputs)


class Resident:
    """The tensors a captured decoder's steps carry, kept per batch size (B) and place.

    Args:
        static: mark each kept tensor a guarded static address (`torch._dynamo.mark_static_address`).

    Attributes:
        kept: {B: {place: tensor}}, a place being the path from a root (``state.text``,
            ``step.sources.0.grid``); a tensor held at two places is kept once.
    """

    def __init__(self, static: bool) -> None:
        self.static = static
        self.kept: dict[int, dict[str, torch.Tensor]] = {}

    def settle(self, rows: int, **roots: object) -> None:
        """Put at every place under `roots` the tensor kept there for a batch of `rows` rows, holding
        the fresh one's values (the first call of a batch size keeps the fresh ones). A place whose
        tensor changed shape, dtype or device keeps the new one (a graph then recompiles)."""
        walk = _Walk(self.kept.setdefault(rows, {}), self.static)
        for name, root in roots.items():
            walk.value(root, name)


class _Walk:
    """One settling pass: each object visited once, each fresh tensor replaced by one kept tensor."""

    def __init__(self, kept: dict[str, torch.Tensor], static: bool) -> None:
        self.kept, self.static = kept, static
        self.seen: set[int] = set()
        self.same: dict[int, torch.Tensor] = {}  # id(fresh) -> its kept tensor: two places holding one stay one

    def value(self, value: object, place: str) -> object:
        """`value` with every tensor under it settled (a tuple rebuilt; lists, dicts and objects changed in place)."""
        if isinstance(value, torch.Tensor):
            return self.tensor(value, place)
        if isinstance(value, (list, dict)) or type(value).__module__.startswith(PACKAGE):
            if id(value) in self.seen:
                return value
            self.seen.add(id(value))
        if isinstance(value, tuple):
            items = [self.value(v, f"{place}.{i}") for i, v in enumerate(value)]
            same = all(a is b for a, b in zip(items, value))
            return value if same else (type(value)(*items) if hasattr(value, "_fields") else tuple(items))
        if isinstance(value, list):
            value[:] = [self.value(v, f"{place}.{i}") for i, v in enumerate(value)]
        elif isinstance(value, dict):
            for key in list(value):
                value[key] = self.value(value[key], f"{place}.{key}")
        elif type(value).__module__.startswith(PACKAGE) and hasattr(value, "__dict__"):
            for name, item in list(vars(value).items()):
                settled = self.value(item, f"{place}.{name}")
                if settled is not item:
                    object.__setattr__(value, name, settled)  # a frozen dataclass's too (the plan's)
        return value

    def tensor(self, fresh: torch.Tensor, place: str) -> torch.Tensor:
        """The tensor kept at `place`, now holding `fresh`'s values."""
        if id(fresh) in self.same:
            return self.same[id(fresh)]
        old = self.kept.get(place)
        if old is not None and old is not fresh and (old.shape, old.dtype, old.device) == (fresh.shape, fresh.dtype, fresh.device):
            old.copy_(fresh)
        elif old is not fresh:
            old = fresh.clone() if any(s == 0 and n > 1 for s, n in zip(fresh.stride(), fresh.shape)) else fresh  # expanded: own memory
            self.kept[place] = old
            if self.static:
                torch._dynamo.mark_static_address(old, guard=True)
        self.same[id(fresh)] = old
        return old


def assign(into: object, fresh: object) -> None:
    """Copy every tensor of `fresh` into the tensor at the same place in `into`: two dataclasses of one
    structure and shapes, as two plans of a captured step (`into` keeps its tensors, now holding
    `fresh`'s values)."""
    if isinstance(into, torch.Tensor):
        if into is not fresh:
            into.copy_(fresh)
    elif isinstance(into, (list, tuple)):
        for a, b in zip(into, fresh):
            assign(a, b)
    elif dataclasses.is_dataclass(into):
        for field in dataclasses.fields(into):
            assign(getattr(into, field.name), getattr(fresh, field.name))
