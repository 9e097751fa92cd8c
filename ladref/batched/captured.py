"""The whole batched step as one compiled program: draft, layout, forward, verify and commit, captured together.

`ladref.batched.loop.decode_batch` reads the next pass's shape from the device before every pass
(or every k passes) and lets finished rows leave, so its shapes change. A captured step can do
neither. `CapturedBatchDecoder` runs the same step (`ladref.batched.step.BatchStep`) in the same
loop (`ladref.batched.loop.run_batch`, driven by `ladref.batched.program.CapturedDriver`) with
every shape fixed:

* every proposed node and the window are fed at every step (`FeedAll`), so Q, the pass's width, is
  known before the first step; the sources kept are those whose drafts keep one shape (prompt
  lookup, Jacobi, lookahead, Token Recycling);
* the KV cache is a `ladref.batched.static.StaticBatchCache` of M slots: the step writes at a
  frontier held on the device, and a commit moves it there;
* rows never leave: a row that stopped keeps nothing more (`BatchState.accept`).

So the step is one function of tensors (`captured_step`), compiled whole (``fullgraph=True``: a
graph break is an error). The host runs k of them (`steps_per_read`), then reads ONE small tensor:
every row's stop flag and budget left, and the frontier. A run ends before any row can spend its
budget and before the slots run out (`StaticBatchCache.compact` then packs them), so only an EOS
leaves a row idle in a run. A sampled step draws from `ladref.batched.noise.KeyedNoise` (a hash of
seed, step, row and index; a `torch.Generator` cannot be captured). Each step ends by planning the
next, so adaptive decoding (``cost``) runs the batch's policy inside the program: the read brings
the next plan's shape, chosen after the last step's outcome, and the next step runs at the
narrowest captured width that holds it (within a run of k > 1 steps, the run's width). Where no
draft can pay (`BatchPolicy.may_draft`, on the host, from the read), the run is of bare steps, a
program of its own that proposes and plans nothing; the first drafting run after them plans
eagerly and runs every node (its plan's shape is not read).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..call import eos_ids
from ..config import check_int
from ..kernels import sdpa_backends
from ..options import CapturedOptions, accept
from ..proposer import Proposer, step_needs
from ..results import BatchResult, batch_result
from ..rows import per_row
from ..facts import check_model
from ..pricing.compiling import check_mode, compile_own, compile_scope
from ..pricing.policy import PolicySettings
from ..pricing.surface import CostSurface
from .loop import check_rows, run_batch
from .policy import BatchPolicy
from .program import CapturedDriver, captured_step, check_fits, check_node_widths, check_settings, each_program, program_cost
from .resident import Resident
from .sample import KeyedSampler
from .source import FeedAll, remember
from .sources import batched_sources
from .state import BatchState
from .static import StaticBatchCache
from .step import BatchStep
from .stream import RowStream


class CapturedBatchDecoder:
    """Greedy, sampled or drafting decoding of a batch, each step one compiled program over a static cache.

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
        cost: a `ladref.pricing.surface.CostSurface` (`measure` times this decoder's own programs):
            adaptive decoding. Each row's nodes and window are chosen on the device
            (`ladref.batched.policy.BatchPolicy`, a step priced at M slots) at the end of the step
            before; the step runs at the narrowest captured width that holds the widest row's choice.
        widths: the draft-node counts captured for adaptive decoding, each with and without the
            window, and every node: one program each (`capture` compiles them all). Default 0, 1, 2, 4, ..., 64.

    Attributes:
        step_width: Q, the tokens of every step (the window or the current token, and every
            proposed node; adaptive: of the widest step), known once a call has run.
        draft_width: the draft nodes of those (every proposed node, at most `draft_budget`).
        compactions: how often a call's slots ran short and were packed (`StaticBatchCache.compact`).
        shapes: the last call's steps at each program shape, {(draft nodes, window): steps}; bare steps
            (nothing planned: no draft could pay) at `ladref.batched.program.BARE`, (0, None).

    Example:
        >>> decoder = CapturedBatchDecoder(model, [LookaheadProposer(LookaheadConfig(7, 5, 7))], max_length=1024)
        >>> result = decoder([ids_a, ids_b], 128)  # the first call of a batch size compiles its step
    """

    def __init__(self, model: torch.nn.Module, proposers: Sequence[Proposer] = (), *, max_length: int,
                 mode: str | None = "default", steps_per_read: int = 8, draft_budget: int | None = None,
                 cost: CostSurface | None = None, widths: Sequence[int] | None = None) -> None:
        self.facts = check_model(model)
        self.proposers = check_settings(proposers, max_length, steps_per_read, draft_budget, cost)
        self.draft_budget, self.cost, self.widths = draft_budget, cost, check_node_widths(widths)
        check_mode(mode, self.facts.device)
        self.model, self.max_length, self.mode, self.every = model, max_length, mode, steps_per_read
        self.depth = max((s.depth for s in batched_sources(self.proposers, 0, self.facts.vocab_size)), default=0)
        self.reach = step_needs(self.proposers, self.depth).reach if self.proposers else 0  # checked against the context
        self.program = compile_own(captured_step, "captured_batch_step", mode, self.facts.device)
        self.caches: dict[int, StaticBatchCache] = {}  # one per batch size: the program's graph holds its buffers
        self.resident = Resident(static=mode not in (None, "max-autotune"))  # the rest of what a step carries, kept likewise
        self.step_width = self.draft_width = None  # Q, and the draft nodes of the widest step: known at the first call
        self.shapes: Counter[tuple[int, bool | None]] = Counter()  # the last call's steps at each (nodes, window)
        self.compactions = 0  # times the slots ran short and every row's were packed to the front (`StaticBatchCache.compact`)
        self.policy: BatchPolicy | None = None  # the last adaptive call's
        self._forced: tuple[int, bool | None] | None = None  # `capture`'s and `measure`'s shape for every step of a call
        self._practice = False  # inside `capture` or `measure` (`each_program`): their calls' outputs are not remembered

    @property
    def method(self) -> str:
        if not self.proposers:
            return "captured_greedy"
        return "captured_" + ("adaptive" if self.cost is not None else "+".join(p.name for p in self.proposers))

    def __call__(self, prompts: Sequence[object], max_new_tokens: int | Sequence[int] = 64,
                 **options: Unpack[CapturedOptions]) -> BatchResult:
        """Decode every prompt; each row's tokens identical to its `greedy_decode` (exactly in float64),
        or, with ``do_sample=True``, drawn as ordinary sampling draws them (`KeyedSampler`).

        Args:
            prompts: B prompts (lists of ints or (L,) / (1, L) tensors); max_new_tokens: one budget or B.
            **options: ``eos_token_id``, ``tokenizer``, ``attention_backend``, the sampling keywords (``do_sample``,
                ``temperature``, ``top_k``, ``top_p``; ``generator`` draws the call's seed), and ``streamer`` for ONE row
                (`RowStream`: the prompt, the row's new tokens with each read, every k steps, then ``end()``).
        """
        accept("CapturedBatchDecoder.__call__", options, CapturedOptions)
        start = time.perf_counter()
        if not isinstance(prompts, Sequence) or not prompts:
            raise ValueError(f"prompts must be a non-empty list of prompts, got {type(prompts).__name__} {prompts!r:.40}")
        budgets = per_row("max_new_tokens", max_new_tokens, len(prompts))
        rows = check_rows(self.facts, prompts, budgets, self.reach)
        eos = eos_ids(self.model, self.facts.vocab_size, options.get("eos_token_id"), options.get("tokenizer"))
        sampler = KeyedSampler.from_options(options, self.facts.device)
        with torch.no_grad():  # not inference mode: torch.compile's functionalization cannot take inference tensors' views
            sources = batched_sources(self.proposers, self.depth, self.facts.vocab_size)
            columns = self.max_length + self.depth + 2  # the text's width, the same at every call
            state = BatchState.start(rows, budgets, eos, self.depth + 1, self.facts.device, columns)
            cache = self._cache(len(rows), options.get("attention_backend", "auto"))
            step = BatchStep(cache, sources, FeedAll(self.draft_budget) if self.cost is None else self._policy(len(rows), sources), sampler)
            for source in sources:
                source.begin(state)
            plan = None if step.plain else step.plan(state)  # eager: the sources' shapes (a fixed tree's ancestor table, kept)
            nodes = self.draft_width = 0 if plan is None else min(plan.feed.shape[1], self.draft_budget or plan.feed.shape[1])
            width = self.step_width = (step.shape.length if step.shape is not None else 1) + nodes
            check_fits(rows, budgets, width, self.max_length)
            stream = RowStream(options.get("streamer"), rows)  # sends the prompt
            cache.prefill(rows, options.get("attention_backend", "auto"))
            self.resident.settle(len(rows), state=state, step=step, plan=plan)  # the batch size's tensors, this call's values
            self.shapes = Counter()
            with compile_scope(self.mode), torch._dynamo.config.patch(recompile_limit=max(8, 2 * len(self.widths) + 3)):
                entries, steps = run_batch(CapturedDriver(self, step, plan, nodes, width, len(sources)), step, state, stream,
                                           len(sources))  # the recompile limit: `program_shapes` and the bare program
        finished = {b: (time.perf_counter(), t) for b, t in enumerate(state.texts())}
        method = "captured_sample" if sampler is not None and not self.proposers else self.method
        result = batch_result(rows, finished, entries, [s.name for s in sources], start, options.get("tokenizer"), method,
                              steps + any(len(r) > 1 for r in rows))
        if not self._practice:  # a memory of outputs (prompt lookup's) grows by a call's, not by `capture`'s or `measure`'s
            remember(sources, [row.token_ids for row in result])
        return result

    def _cache(self, rows: int, backend: str) -> StaticBatchCache:
        """The batch size's static cache, made at its first call and kept (its buffers keep their addresses)."""
        if rows not in self.caches:
            kernels = sdpa_backends(backend, self.facts.device, self.facts.attention)
            self.caches[rows] = StaticBatchCache(self.model, self.facts, kernels, rows, self.max_length)
        return self.caches[rows]

    def _policy(self, rows: int, sources: list) -> BatchPolicy:
        """A call's adaptive choice (`BatchPolicy`) for B = `rows`, never feeding more than `draft_budget` nodes."""
        self.policy = BatchPolicy(self.cost, rows, [s.name for s in sources], self.depth, PolicySettings(), self.facts.device,
                                  span=self.max_length)  # a surface set later (`measure`) keeps the programs' shapes
        self.policy.limit = None if self.draft_budget is None else (self.draft_budget, True)
        return self.policy

    def capture(self, prompts: Sequence[object]) -> float:
        """Compile now every program an adaptive decoder can run for a batch of ``len(prompts)`` rows
        (`program_shapes`: each captured width, with and without the window, and every node), rather
        than at first use inside a call; returns the seconds taken. Without `cost` the decoder has
        one program, and any call compiles it."""
        start = time.perf_counter()
        each_program(self, prompts, 3, first=3)
        return time.perf_counter() - start

    def measure(self, prompts: Sequence[object], new_tokens: int = 16) -> CostSurface:
        """t(q) of this adaptive decoder's own programs for a batch of ``len(prompts)`` rows: each program
        shape run for a call of `new_tokens`, its compiled steps timed (the median), as a surface
        whose steps cost what the program that runs them costs (`program_cost`). Set it as ``cost``
        (``decoder.cost = decoder.measure(prompts)``) to price steps on the captured programs."""
        if self.cost is None:
            raise ValueError("measure times an adaptive decoder's programs: make the decoder with cost=... (any surface)")
        check_int("new_tokens", new_tokens, 2)
        times = each_program(self, prompts, new_tokens, first=2 if self.step_width is None else 0)  # a first call sizes it
        return program_cost(times, self.step_width - 1 - self.draft_width)
