"""The captured program: one batched step of fixed shapes, and what it can take.

`captured_step` is the whole step (`ladref.batched.step.BatchStep`: forward, verify, commit, learn,
then the next step's plan) as one function of tensors, its shapes fixed by the host's two ints (the
draft nodes fed and whether the window is). It plans the next step at its end, so the shape the
host reads between steps is that of the plan the next step runs, chosen after this step's outcome.
`ladref.batched.captured.CapturedBatchDecoder` compiles it whole and runs it in the batch's one
loop (`ladref.batched.loop.run_batch`) through `CapturedDriver`: the run's program shape, the
slots packed when short, rows that never leave. The helpers here say what it can take (the sources
whose forms keep one shape, `check_settings`; `check_node_widths`; a call's room, `check_fits`),
which programs it runs (`program_shapes`), and run and price them (`each_program`, `program_cost`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from ..call import sync
from ..config import check_int
from ..pricing.cost import CostModel
from ..pricing.surface import CostSurface
from ..proposer import Proposer, check_proposers
from .loop import bare_log, step_log
from .resident import assign
from .sources import batch_form, fixed_shape_references
from .state import BatchState
from .step import BatchStep, Plan


BARE = (0, None)  # the (nodes, window) key of the bare program (`captured_step` without a plan) in `each_program`'s times


def check_node_widths(widths: Sequence[int] | None) -> tuple[int, ...]:
    """The draft-node counts an adaptive captured decoder compiles, sorted (default 0, 1, 2, 4, ... 64)."""
    if widths is None:
        return (0, 1, 2, 4, 8, 16, 32, 64)
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise TypeError(f"widths must be a non-empty sequence of node counts, got {widths!r:.40}")
    for w in widths:
        check_int("a width", w, 0)
    return tuple(sorted(set(widths)))


def check_fits(rows: Sequence[torch.Tensor], budgets: Sequence[int], width: int, max_length: int) -> None:
    """Refuse a captured call whose longest prompt + largest budget + step `width` passes the `max_length` slots."""
    need = max(r.shape[0] for r in rows) + max(budgets) + width
    if need > max_length:
        raise ValueError(f"the longest prompt ({max(r.shape[0] for r in rows)}) + max_new_tokens ({max(budgets)}) + the "
                         f"step's width ({width}) = {need} exceeds this decoder's max_length {max_length}")


def program_shapes(decoder: object) -> list[tuple[int, bool]]:
    """Every (draft nodes, window) program an adaptive `CapturedBatchDecoder` can run once a call has
    sized it: each captured width (at most every node), with and without the window, and every
    node; none without ``cost`` (its one program is the full step's)."""
    if decoder.cost is None:
        return []
    windows = (False, True) if decoder.step_width > 1 + decoder.draft_width else (False,)  # a window's cells, or none
    widths = (*decoder.widths, decoder.draft_width)
    return sorted({(min(w, decoder.draft_width), window) for w in widths for window in windows})


def program_cost(times: dict[tuple[int, bool], float], cells: int) -> CostSurface:
    """A cost surface from each program's seconds a step ({(nodes, window): s}, the window `cells`
    wide, q = 1 + nodes + cells x window): t(q) is the time of the cheapest program at least q wide,
    so a policy pricing a step of q tokens prices a program that can run it (a staircase, not a
    line between the programs)."""
    times = {shape: s for shape, s in times.items() if shape != BARE}  # a bare step is priced as no draft: the (0, False) program
    if not times:
        raise ValueError("program_cost needs the time of at least one program")
    width = {1 + nodes + cells * window: s for (nodes, window), s in times.items()}
    steps, cheapest = {}, float("inf")
    for q in sorted(width, reverse=True):  # a program is used for every q up to its width, unless a wider one is cheaper
        cheapest = min(cheapest, width[q])
        steps[q] = cheapest
    qs = sorted(steps)
    stairs = {1: steps[qs[0]], **steps, **{a + 1: steps[b] for a, b in zip(qs, qs[1:]) if b > a + 1}}
    return CostSurface.of(CostModel.from_times(stairs, label=f"captured programs ({len(times)})"))


def each_program(decoder: object, prompts: Sequence[object], new_tokens: int, first: int = 0) -> dict[tuple[int, bool], float]:
    """A `CapturedBatchDecoder`'s practice calls (`capture`, `measure`): a first call of `first` new
    tokens (none: 0), then a call of `new_tokens` at each program shape (`program_shapes`; its first
    step uncompiled), and one of bare steps (an adaptive decoder's, `BARE`). Returns the median
    seconds of each shape's compiled steps; no output of these calls is remembered (a source's
    memory of outputs is left as it was)."""
    clock, times = decoder.program, {}

    def timed(*args: object) -> object:
        start = time.perf_counter()
        out = clock(*args)
        sync(decoder.facts.device)
        times.setdefault(args[3:5] if args[2] is not None else BARE, []).append(time.perf_counter() - start)
        return out

    decoder._practice = True
    try:
        if first:
            decoder(prompts, first, eos_token_id=[])
        decoder.program = timed
        for shape in program_shapes(decoder) + ([BARE] if decoder.cost is not None else []):
            decoder._forced = shape
            decoder(prompts, new_tokens, eos_token_id=[])
    finally:
        decoder.program, decoder._forced, decoder._practice = clock, None, False
    return {shape: statistics.median(t) for shape, t in times.items()}


def check_settings(proposers: Sequence[Proposer], max_length: int, steps_per_read: int, draft_budget: int | None,
                   cost: CostSurface | None) -> list[Proposer]:
    """`CapturedBatchDecoder`'s arguments checked (TypeError or ValueError naming the problem); the proposers."""
    proposers = check_proposers(list(proposers)) if proposers else []
    for proposer in proposers:
        form = batch_form(proposer)
        if form is None or not form.fixed_shape:
            takes = ", ".join(reference.__name__ for reference in fixed_shape_references())
            raise TypeError(f"{type(proposer).__name__} cannot be captured: its drafts change shape (or live on the host); "
                            f"captured steps take {takes}")
    check_int("max_length", max_length, 2)
    check_int("steps_per_read", steps_per_read, 1)
    if draft_budget is not None:
        check_int("draft_budget", draft_budget, 1)
    if cost is not None and not isinstance(cost, CostSurface):
        raise TypeError(f"cost must be a CostSurface (ladref.pricing.surface), got {type(cost).__name__}")
    if cost is not None and not proposers:
        raise ValueError("adaptive decoding (cost=...) needs draft sources: pass proposers")
    return proposers


def captured_step(step: BatchStep, state: BatchState, plan: Plan | None, nodes: int, window: bool, cells: int,
                  sources: int) -> torch.Tensor:
    """One step of every row, `nodes` draft-node positions and the window (when `window`) fed, nothing
    read back; then the next step's plan, written into `plan` (in place, as everything a step
    carries: `ladref.batched.resident`), so that the host reads its shape with the stop flags.

    Args:
        plan: this step's `Plan` (steps 1-2, made by the step before: its feed fits `nodes` and
            `window`); None for greedy decoding and plain sampling, and for a bare step of an
            adaptive batch where no draft can pay (`BatchStep.run_bare`: nothing fed, nothing planned:
            `BARE`, a program of its own).

    Returns:
        (B, 3 + 2S) long, the step's log (`ladref.batched.loop.step_log`); (B, 1), the tokens kept, for a plain step.
    """
    if step.plain:  # greedy decoding: the current token alone
        before = state.produced.clone()
        step.run_plain(state)
        return (state.produced - before)[:, None]
    if plan is None:  # no draft can pay: the current token alone, the sources and the policy learning from it
        return bare_log(step.run_bare(state), sources)
    outcome = step.run(state, plan, nodes, window)  # 3.-6. forward, verify, commit, learn
    log = step_log(outcome, cells, sources)
    assign(plan, step.plan(state))  # 1.-2. of the next step: propose, merge, choose
    return log


class CapturedDriver:
    """A `CapturedBatchDecoder`'s `ladref.batched.loop.Driver`: runs of its compiled step
    (`captured_step`) at fixed program shapes, rows that never leave, and a static cache packed when
    its slots run short. `plan`: the first step's, made eagerly (each step makes the next one's, in
    place); `nodes`, `width`: the draft nodes and Q of the widest step; `sources`: S."""

    def __init__(self, decoder: object, step: BatchStep, plan: Plan | None, nodes: int, width: int, sources: int) -> None:
        self.decoder, self.step, self.plan, self.nodes, self.width, self.sources = decoder, step, plan, nodes, width, sources
        self.every, self.shape, self.stale = decoder.every, BARE, False  # stale: the plan in hand was made before bare steps

    def asks(self, state: BatchState) -> list[torch.Tensor]:
        """The frontier and, adaptive, the next plan's shape, the policy's widest choice without the
        run's limit (when it had one), and last the policy's (2 + D,) `hope` (`BatchPolicy.may_draft`)."""
        policy, frontier = self.decoder.policy, [self.step.cache.frontier[None]]
        if policy is None:
            return frontier
        return frontier + [self.plan.shape] + ([policy.wanted] if policy.limit is not None else []) + [policy.hope(state)]

    def heard(self, state: BatchState, done: list[int], rest: list[int]) -> int:
        """The slots packed when one more step would not fit, the run's shape chosen (`shape_of`); the
        most steps the slots hold (0: every row stopped)."""
        if all(done):
            return 0
        decoder, cache, frontier, reach = self.decoder, self.step.cache, rest[0], self.step.deepest + 1  # reach: a step's most
        if frontier + self.width > decoder.max_length:  # no room for one more step: pack every row's slots to the front
            cache.compact()
            decoder.compactions += 1
            frontier = int(cache.frontier)
        room = (decoder.max_length - self.width - frontier) // reach + 1
        if room < 1:  # cannot happen when the call's check passed: a row holds at most prompt + budget slots
            raise RuntimeError(f"no room for a step of {self.width} tokens after {frontier} of {decoder.max_length} slots")
        self.shape = self.shape_of(state, rest[1:])
        return min(self.every, room)

    def shape_of(self, state: BatchState, wish: list[int]) -> tuple[int, bool | None]:
        """(nodes, window) of the next run: every node and the window (`FeedAll`), else `BARE` where no
        draft can pay, else the narrowest captured width holding the plan in hand and the policy's
        wish (the first step of a call too: it runs uncompiled, at that width), but every node for
        the first run after bare steps, its plan made now (the one in hand is older than they are).
        Inside a run of k > 1 steps the policy then chooses within its width (`BatchPolicy.limit`)."""
        decoder, step, policy, full = self.decoder, self.step, self.decoder.policy, (self.nodes, self.step.shape is not None)
        if policy is None:
            return full
        wish, hope = wish[: -policy.hoped], wish[-policy.hoped :]
        if decoder._forced is not None:  # `capture`'s and `measure`'s
            shape = decoder._forced
        elif not policy.may_draft(state.size, step.cache.attended, step.window_cells, hope):
            shape = BARE
        elif self.stale:
            assign(self.plan, step.plan(state))
            shape = full
        else:
            shape = (min([w for w in decoder.widths if w >= max(wish[0::2])] + [self.nodes]), any(wish[1::2]) and step.shape is not None)
        self.stale = shape == BARE
        if decoder.every > 1 and shape != BARE:  # the plans made inside a run: within its width (k = 1: `draft_budget`'s cap, or none)
            policy.limit = shape
        return shape

    def run_step(self, state: BatchState, steps: int, within: bool) -> torch.Tensor | None:
        """One step at the run's shape: the call's first eagerly (it makes the state the program reads:
        tables, rings), the others the compiled program; its log (None: plain decoding)."""
        self.decoder.shapes[self.shape] += 1
        program = captured_step if steps == 0 else self.decoder.program
        logged = program(self.step, state, None if self.shape == BARE else self.plan, *self.shape, self.step.window_cells or 0,
                         self.sources)
        return None if self.step.plain else logged
