"""The instruments of ``bench --host-overhead`` (`ladref.bench.host`): the tiny model and its prompts, the
decoders as one call shape, hooks that time the model's forward, and the op and read counts of a profiled call."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import torch
import transformers
from torch.profiler import ProfilerActivity, profile, record_function

ADAPTIVE_SURFACE = (0.01, 0.00002)
"""`ladref.pricing.surface.CostSurface.roofline`'s (weights_s, token_s): GPU-like, ridge 500 tokens (drafts look cheap)."""
READ_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique")
"""Ops (name prefixes) that read a device value back to the host: a scalar read, or an output sized by the data."""
HOST_CALLS = ("tolist", "numpy", "item")
"""Tensor methods counted by the ``sys.setprofile`` hook (``item`` for information: its read is an aten op)."""
FORWARD_RANGE = "ladref.host::model_forward"


def tiny_llama(seed: int = 0) -> torch.nn.Module:
    """The float32 Llama the host work is measured on, built from its config with seeded random weights."""
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                      bos_token_id=0, eos_token_id=None, pad_token_id=0)
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return transformers.LlamaForCausalLM(config).eval()


def repetitive_prompts(batch: int, vocab: int = 512, seed: int = 0) -> list[list[int]]:
    """`batch` prompts, row b a random period of 5-8 tokens repeated to 60 + b tokens (a batch's rows, a larger one's first)."""
    generator, rows = torch.Generator().manual_seed(seed), []
    for b in range(batch):
        period = torch.randint(vocab, (int(torch.randint(5, 9, (1,), generator=generator)),), generator=generator).tolist()
        rows.append((period * (60 + b))[: 60 + b])
    return rows


def hf_generate(model: torch.nn.Module, prompts: Sequence[Sequence[int]], new_tokens: int) -> torch.Tensor:
    """transformers' batched greedy ``generate``, prompts padded on the left: the (B, new_tokens) new ids."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                         pad_token_id=0)
    return out[:, width:]


Decoder = Callable[[torch.nn.Module, list[list[int]], int], object]


def host_decoders() -> dict[str, Decoder]:
    """Each of `ladref.bench.host.HOST_METHODS` as ``decode(model, prompts, new_tokens)``: ladref's a `BatchResult`, generate's ids."""
    from .. import (LookaheadConfig, adaptive_decode, greedy_decode, jacobi_decode, lookahead_decode, prompt_lookup_decode,
                    recycling_decode)
    from ..pricing.surface import CostSurface

    surface, no_eos = CostSurface.roofline(*ADAPTIVE_SURFACE), {"eos_token_id": []}
    return {"greedy": lambda m, p, n: greedy_decode(m, p, n, **no_eos),
            "prompt_lookup": lambda m, p, n: prompt_lookup_decode(m, p, n, draft_len=4, **no_eos),
            "lookahead": lambda m, p, n: lookahead_decode(m, p, n, config=LookaheadConfig(4, 4, 4), **no_eos),
            "recycling": lambda m, p, n: recycling_decode(m, p, n, **no_eos),
            "adaptive": lambda m, p, n: adaptive_decode(m, p, n, cost=surface, **no_eos),
            "jacobi": lambda m, p, n: jacobi_decode(m, p, n, block_size=4, **no_eos),
            "generate": hf_generate}


class ForwardMeter:
    """Hooks on a model, while entered: its forward calls, the seconds inside them, and (`label`) a
    ``record_function`` range around each, for the profiler to tell the forward's ops apart."""

    def __init__(self, model: torch.nn.Module, label: str | None = None) -> None:
        self.model, self.label = model, label
        self.calls, self.seconds, self._start, self._range = 0, 0.0, 0.0, None

    def __enter__(self) -> ForwardMeter:
        self._handles = [self.model.register_forward_pre_hook(self._before), self.model.register_forward_hook(self._after)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, module: torch.nn.Module, args: tuple) -> None:
        if self.label is not None:
            self._range = record_function(self.label)
            self._range.__enter__()
        self._start = time.perf_counter()

    def _after(self, module: torch.nn.Module, args: tuple, output: object) -> None:
        self.seconds += time.perf_counter() - self._start
        self.calls += 1
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None


def count_ops(events: Sequence) -> Counter:
    """Top-level ``aten::`` ops (no aten op above them: ``ops``, and ``host_ops`` outside `FORWARD_RANGE`) and
    reads (each `READ_OPS` op with no read above it: ``scalar`` for scalar reads, ``sync`` for the rest)."""
    counts: Counter = Counter()
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        above, parent = [], event.cpu_parent
        while parent is not None:
            above.append(parent.name)
            parent = parent.cpu_parent
        if event.name.startswith(READ_OPS) and not any(name.startswith(READ_OPS) for name in above):
            counts["scalar" if event.name == READ_OPS[0] else "sync"] += 1
        if not any(name.startswith("aten::") for name in above):
            counts["ops"] += 1
            counts["host_ops"] += FORWARD_RANGE not in above
    return counts


def profiled(model: torch.nn.Module, call: Callable[[], object]) -> tuple[Counter, object]:
    """`call()` under torch.profiler (every thread) and a ``sys.setprofile`` hook (every thread it starts):
    `count_ops`' counts, ``tolist`` / ``numpy`` / ``item`` calls on tensors, and ``passes``; and its result."""
    called: list[str] = []  # appended from every thread (an append is atomic under the GIL)

    def hook(frame: object, event: str, arg: object) -> None:
        name = getattr(arg, "__name__", None) if event == "c_call" else None
        if name in HOST_CALLS and isinstance(getattr(arg, "__self__", None), torch.Tensor):
            called.append(name)

    config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with profile(activities=[ProfilerActivity.CPU], experimental_config=config) as prof, ForwardMeter(model, FORWARD_RANGE) as meter:
        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            result = call()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    counts = count_ops(prof.events()) + Counter(called)
    counts["passes"] = meter.calls
    return counts, result


def timed(model: torch.nn.Module, call: Callable[[], object]) -> tuple[float, float, int]:
    """`call()`'s wall seconds, the seconds inside the model's forward, and its forward passes."""
    with ForwardMeter(model) as meter:
        start = time.perf_counter()
        call()
        wall = time.perf_counter() - start
    return wall, meter.seconds, meter.calls
