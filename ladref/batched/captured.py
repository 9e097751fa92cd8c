"""The whole batched step as one compiled program: draft, layout, forward, verify and commit, captured together.

`ladref.batched.loop.decode_batch` reads the next pass's shape from the device before every pass
(or every k passes) and lets finished rows leave, so its shapes change. A captured step can do
neither. `CapturedBatchDecoder` runs the same step (`ladref.batched.step.BatchStep`) with every
shape fixed:

* every proposed node and the window are fed at every step (`FeedAll`), so Q, the pass's width, is
  known before the first step; the sources kept are those whose drafts keep one shape (prompt
  lookup, Jacobi, lookahead, Token Recycling);
* the KV cache is a `ladref.batched.static.StaticBatchCache` of M slots: the step writes at a
  frontier held on the device, and a commit moves it there;
* rows never leave: a row that stopped keeps nothing more (`BatchState.accept`).

So the step is one function of tensors (`captured_step`), compiled whole (``torch.compile``,
``fullgraph=True``: a graph break is an error, not a silent fallback to Python). The host runs k
of them (`steps_per_read`) and then reads ONE small tensor: every row's stop flag, its budget left
and the frontier. A run ends before any row can spend its budget and before the cache's slots
run out (then `StaticBatchCache.compact` packs every row's slots to the front), so only an EOS
leaves a row idle in a run. Greedy verification only: sampling inside a run needs a device
generator, not written yet.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..call import eos_ids, sync
from ..config import check_int
from ..kernels import sdpa_backends
from ..options import BaselineOptions, accept
from ..proposer import Proposer, check_proposers, step_needs
from ..results import BatchResult
from ..rows import per_row
from ..runner import check_model
from ..fast.compiling import check_mode, compile_own, compile_scope
from .loop import _results, check_rows, step_log
from .source import FeedAll
from .sources import batched_sources
from .state import BatchState
from .static import StaticBatchCache
from .step import BatchStep


def scalar_kernels(mode: str | None, device: torch.device) -> contextlib.AbstractContextManager:
    """Inductor's CPU kernels unvectorized while the captured step compiles (scoped, never global).

    With SmolLM2-135M and lookahead 4/4/4 (torch 2.13), the vectorized form of the fused
    verify-and-commit kernel failed one of its own index checks, where the same graph ran correctly
    with scalar kernels, under ``aot_eager``, and eagerly (`scripts/captured_specbench.py`). The
    model's GEMMs are library calls either way.
    """
    if mode is None or device.type != "cpu":
        return contextlib.nullcontext()
    return torch._inductor.config.patch({"cpp.simdlen": 1})


def capturable() -> tuple[type, ...]:
    """The proposers whose batch forms keep one shape from step to step (the only ones a captured step takes)."""
    from ..sources.jacobi import JacobiProposer
    from ..sources.lookahead import LookaheadProposer
    from ..sources.prompt_lookup import PromptLookupProposer
    from ..sources.recycling import RecyclingProposer

    return JacobiProposer, PromptLookupProposer, LookaheadProposer, RecyclingProposer


def captured_step(step: BatchStep, state: BatchState, nodes: int, cells: int, sources: int) -> torch.Tensor:
    """One step of every row, its first `nodes` proposed nodes (`FeedAll`) and the window fed, nothing read back.

    Returns:
        (B, 3 + 2S) long, the step's log (`ladref.batched.loop.step_log`); (B, 1), the tokens kept, for a plain step.
    """
    if step.plain:  # greedy decoding: the current token alone
        before = state.produced.clone()
        step.run_plain(state)
        return (state.produced - before)[:, None]
    plan = step.plan(state)
    outcome = step.run(state, plan, nodes, step.shape is not None)
    return step_log(outcome, cells, sources)


class CapturedBatchDecoder:
    """Greedy or drafting decoding of a batch, each step one compiled program over a static cache.

    Args:
        model: a decoder-only transformers model (eager or SDPA attention, full-attention cache).
        proposers: the draft sources, each a `ladref.JacobiProposer`, `PromptLookupProposer`,
            `LookaheadProposer` (W, N, G) or `RecyclingProposer` (fresh state each call); none: greedy.
        max_length: M, the static cache's slots a row: the longest prompt + max_new_tokens + the
            step's width Q must fit.
        mode: "default" (Inductor), "reduce-overhead" (CUDA graphs, CUDA only), "max-autotune", or
            None: the same program, not compiled (what the identity tests run).
        steps_per_read: k, the captured steps between two reads from the device.
        draft_budget: the most draft nodes a row feeds a step (its first ones, parents before
            children: `FeedAll`); None: every proposed node. A smaller step for a larger batch.

    Attributes:
        step_width: Q, the tokens of every step (the window or the current token, and every
            proposed node), known once a call has run.
        compactions: how often a call's slots ran short and were packed (`StaticBatchCache.compact`).

    Example:
        >>> decoder = CapturedBatchDecoder(model, [LookaheadProposer(LookaheadConfig(7, 5, 7))], max_length=1024)
        >>> result = decoder([ids_a, ids_b], 128)   # the first call of a batch size compiles its step
    """

    def __init__(self, model: torch.nn.Module, proposers: Sequence[Proposer] = (), *, max_length: int,
                 mode: str | None = "default", steps_per_read: int = 8, draft_budget: int | None = None) -> None:
        self.facts = check_model(model)
        self.proposers = check_proposers(list(proposers)) if proposers else []
        captured = capturable()
        for proposer in self.proposers:
            if type(proposer) not in captured:
                raise TypeError(f"{type(proposer).__name__} cannot be captured: its drafts change shape (or live on the host); "
                                f"captured steps take {', '.join(c.__name__ for c in captured)}")
        check_int("max_length", max_length, 2)
        check_int("steps_per_read", steps_per_read, 1)
        if draft_budget is not None:
            check_int("draft_budget", draft_budget, 1)
        self.draft_budget = draft_budget
        check_mode(mode, self.facts.device)
        self.model, self.max_length, self.mode, self.every = model, max_length, mode, steps_per_read
        self.depth = max((s.depth for s in batched_sources(self.proposers, 0, self.facts.vocab_size)), default=0)
        self.reach = step_needs(self.proposers, self.depth).reach if self.proposers else 0  # checked against the context
        self.program = compile_own(captured_step, "captured_batch_step", mode, self.facts.device)
        self.caches: dict[int, StaticBatchCache] = {}  # one per batch size: the program's graph holds its buffers
        self.step_width: int | None = None  # Q, known at the first call
        self.compactions = 0  # times the slots ran short and every row's were packed to the front (`StaticBatchCache.compact`)

    @property
    def method(self) -> str:
        return "captured_greedy" if not self.proposers else "captured_" + "+".join(p.name for p in self.proposers)

    def __call__(self, prompts: Sequence[object], max_new_tokens: int | Sequence[int] = 64,
                 **options: Unpack[BaselineOptions]) -> BatchResult:
        """Decode every prompt; each row's tokens identical to its `greedy_decode` (exactly in float64).

        Args:
            prompts: B prompts (lists of ints or (L,) / (1, L) tensors); max_new_tokens: one budget or B.
            **options: ``eos_token_id``, ``tokenizer``, ``attention_backend``.
        """
        accept("CapturedBatchDecoder.__call__", options, BaselineOptions)
        if options.get("streamer") is not None:
            raise ValueError("a captured batch takes no streamer: its rows' tokens are read once they have all stopped")
        start = time.perf_counter()
        if not isinstance(prompts, Sequence) or not prompts:
            raise ValueError(f"prompts must be a non-empty list of prompts, got {type(prompts).__name__} {prompts!r:.40}")
        budgets = per_row("max_new_tokens", max_new_tokens, len(prompts))
        rows = check_rows(self.facts, prompts, budgets, self.reach)
        eos = eos_ids(self.model, self.facts.vocab_size, options.get("eos_token_id"), options.get("tokenizer"))
        with torch.no_grad():  # not inference mode: torch.compile's functionalization cannot take inference tensors' views
            sources = batched_sources(self.proposers, self.depth, self.facts.vocab_size)
            columns = self.max_length + self.depth + 2  # the text's width, the same at every call
            state = BatchState.start(rows, budgets, eos, self.depth + 1, self.facts.device, columns)
            cache = self._cache(len(rows), options.get("attention_backend", "auto"))
            step = BatchStep(cache, sources, FeedAll(self.draft_budget))
            for source in sources:
                source.begin(state)
            nodes = 0 if step.plain else self._nodes(step, state)
            width = self.step_width = (step.shape.length if step.shape is not None else 1) + nodes
            need = max(r.shape[0] for r in rows) + max(budgets) + width
            if need > self.max_length:
                raise ValueError(f"the longest prompt ({max(r.shape[0] for r in rows)}) + max_new_tokens ({max(budgets)}) + the "
                                 f"step's width ({width}) = {need} exceeds this decoder's max_length {self.max_length}")
            cache.prefill(rows, options.get("attention_backend", "auto"))
            log, steps = self._run(step, state, nodes, width, len(sources))
        sync(self.facts.device)
        names = [s.name for s in sources]
        finished = {b: (time.perf_counter(), t) for b, t in enumerate(self._texts(state))}
        entries = log[:steps].tolist() if sources else []
        return _results(rows, finished, entries, names, start, options.get("tokenizer"), self.method,
                        steps + any(len(r) > 1 for r in rows))

    def _cache(self, rows: int, backend: str) -> StaticBatchCache:
        """The batch size's static cache, made at its first call and kept (its buffers keep their addresses)."""
        if rows not in self.caches:
            kernels = sdpa_backends(backend, self.facts.device, self.facts.attention)
            self.caches[rows] = StaticBatchCache(self.model, self.facts, kernels, rows, self.max_length)
        return self.caches[rows]

    def _nodes(self, step: BatchStep, state: BatchState) -> int:
        """The draft nodes every captured step feeds a row: every proposed node, at most `draft_budget`."""
        plan = step.plan(state)  # eager, once: the sources' shapes (and a fixed tree's ancestor table, kept)
        return plan.feed.shape[1] if self.draft_budget is None else min(plan.feed.shape[1], self.draft_budget)

    def _run(self, step: BatchStep, state: BatchState, nodes: int, width: int, sources: int) -> tuple[torch.Tensor, int]:
        """Runs of captured steps, ONE read between two runs; returns the step log and the steps run."""
        cache, reach = step.cache, step.deepest + 1  # the most a step moves the frontier
        log = torch.zeros(int(state.budget.max()) + self.every, state.size, 3 + 2 * sources if sources else 1, dtype=torch.long,
                          device=state.text.device)
        steps = 0
        with compile_scope(self.mode), scalar_kernels(self.mode, self.facts.device):
            while True:
                read = torch.cat([state.done.long(), state.budget - state.produced, cache.frontier[None]]).tolist()  # the read
                done, left, frontier = read[: state.size], read[state.size : 2 * state.size], read[-1]
                if all(done):
                    return log, steps
                if frontier + width > self.max_length:  # no room for one more step: pack every row's slots to the front
                    cache.compact()
                    self.compactions += 1
                    frontier = int(cache.frontier)
                room = (self.max_length - width - frontier) // reach + 1
                if room < 1:  # cannot happen when the call's check passed: a row holds at most prompt + budget slots
                    raise RuntimeError(f"no room for a step of {width} tokens after {frontier} of {self.max_length} slots")
                run = min([self.every, room] + [-(-r // reach) for r, d in zip(left, done) if not d])
                for _ in range(run):
                    log[steps] = self.program(step, state, nodes, step.window_cells or 0, sources)
                    steps += 1

    @staticmethod
    def _texts(state: BatchState) -> list[list[int]]:
        """Every row's text (prompt and kept tokens), in the batch's order (rows never leave a captured batch)."""
        texts, lengths = state.text.tolist(), state.length.tolist()
        return [text[:length] for text, length in zip(texts, lengths)]
