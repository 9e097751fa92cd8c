"""A captured step's state at fixed addresses (`ladref.batched.resident`): what CUDA graphs need, checked on a CPU.

cudagraph trees replay a graph only when every input it mutates sits at a static address, and a
graph's outputs are overwritten at its next replay. So every tensor a captured step carries must
be the same tensor after the step as before it (updated in place, never replaced), and the same
at every call of a batch size (`Resident.settle`). The property tests check that for every
captured source, greedy and sampled decoding and the adaptive policy, on the uncompiled program;
the compiled tests in test_captured.py check it through the compiler (guarded static addresses
under ``error_on_recompile``), and the GPU test there that no graph is skipped.
"""

from __future__ import annotations

import pytest
import torch
from strategies import tiny_model
from test_captured import SOURCES, greedy

from ladref import CapturedBatchDecoder
from ladref.batched.drafts import Drafts
from ladref.batched.resident import Resident
from ladref.batched.state import BatchState
from ladref.pricing.cost import CostModel
from ladref.pricing.surface import CostSurface

pytestmark = pytest.mark.usefixtures("one_thread")

DECODERS = {**{name: (make, {}) for name, make in SOURCES.items()},
            "adaptive": (SOURCES["lookahead+lookup"], {"cost": CostSurface.of(CostModel.from_ratios({1: 1.0, 4: 1.02, 64: 3.0})),
                                                       "widths": (2,)}),
            "sampled lookahead": (SOURCES["lookahead"], {}),
            "sampled greedy": (SOURCES["greedy"], {})}


def carried(value: object, place: str = "", found: dict | None = None, seen: set | None = None) -> dict[str, torch.Tensor]:
    """{place: tensor} of every tensor under `value`: in ladref.batched's objects, lists, tuples and dicts."""
    found, seen = {} if found is None else found, set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        found[place] = value
    elif id(value) not in seen and (isinstance(value, (list, tuple, dict)) or type(value).__module__.startswith("ladref.batched")):
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else \
            vars(value).items() if hasattr(value, "__dict__") else ()
        for key, item in items:
            carried(item, f"{place}.{key}", found, seen)
    return found


@pytest.mark.parametrize("name", DECODERS)
def test_a_captured_step_keeps_every_tensor_it_carries_at_one_address(name):
    make, options = DECODERS[name]
    model = tiny_model("llama", 16, 0)
    decoder = CapturedBatchDecoder(model, make(16), max_length=160, mode=None, steps_per_read=2, **options)
    compiled, steps, places = decoder.program, [0], {}

    def checked(*args):
        before = carried(args[:3])
        versions = {place: t._version for place, t in before.items()}
        out = compiled(*args)
        after = carried(args[:3])
        assert after.keys() == before.keys() and all(after[p] is before[p] for p in after)  # nothing replaced
        kept = {id(t) for t in decoder.resident.kept[args[1].size].values()}
        assert all(id(t) in kept for p, t in after.items() if t._version != versions[p])  # what it mutates is kept
        for place, t in after.items():  # ... and the same tensor at every call of the batch size
            assert places.setdefault(place, t) is t, place
        steps[0] += 1
        return out

    decoder.program = checked
    sampled = {"do_sample": True, "temperature": 0.7, "generator": torch.Generator().manual_seed(0)} if name.startswith("sampled") else {}
    for batch, budgets in (([[1, 2, 3, 1, 2], [4, 5, 4], [7, 7, 3, 7]], [20, 9, 14]), ([[9, 8], [1, 1, 1, 2], [3]], [12, 17, 5])):
        result = decoder(batch, budgets, eos_token_id=[], **sampled)
        if not sampled:
            assert result.token_ids == greedy(model, batch, budgets)
    assert steps[0] >= 6 and len(places) >= 8


def test_settle_copies_a_calls_tensors_into_the_ones_kept_for_its_batch_size():
    resident = Resident(static=True)

    def fresh(prompts, eos):
        state = BatchState.start([torch.tensor(p) for p in prompts], [4] * len(prompts), eos, 2, torch.device("cpu"), 16)
        drafts = Drafts.of(state.text[:, :3].clone(), torch.tensor([-1, 0, 1]), torch.ones(len(prompts), 3, dtype=torch.bool))
        return state, drafts, {"pair": (state.length, torch.zeros(3).expand(len(prompts), 3))}  # a tensor held twice, an expanded one

    state, drafts, extra = fresh([[1, 2], [3, 4, 5]], {0})
    resident.settle(2, state=state, drafts=drafts, extra=extra)
    first = carried((state, drafts, extra))
    assert extra["pair"][0] is state.length  # held twice, kept once
    assert extra["pair"][1].stride() == (3, 1)  # an expanded tensor gets memory of its own
    assert all(getattr(t, "_dynamo_static_input_type", None) == "guarded" for t in first.values())
    state, drafts, extra = fresh([[6, 7, 8], [9]], {0})
    values = {place: t.clone() for place, t in carried((state, drafts, extra)).items()}
    resident.settle(2, state=state, drafts=drafts, extra=extra)
    again = carried((state, drafts, extra))
    assert all(again[p] is first[p] for p in first)  # the same tensors, frozen dataclass (Drafts) included ...
    assert all(torch.equal(again[p], values[p]) for p in values)  # ... holding this call's values
    state, drafts, extra = fresh([[6, 7, 8], [9]], {0, 1, 2, 3, 4})  # five eos ids, padded to 8: another shape, another tensor
    resident.settle(2, state=state, drafts=drafts, extra=extra)
    assert state.eos is not first[".0.eos"] and state.text is first[".0.text"]
    one, _, _ = fresh([[5]], {0})
    resident.settle(1, state=one)
    assert one.text is not first[".0.text"] and set(resident.kept) == {1, 2}  # one set of tensors a batch size
