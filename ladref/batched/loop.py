"""Decoding a batch: the one loop of every batch, eager or captured, and its eager driver.

`run_batch` is the loop of `decode_batch` and of `ladref.batched.captured.CapturedBatchDecoder`:
ONE small read from the device (every row's stop flag and budget left, what its `Driver` asks,
a streamer's tokens: `ladref.batched.stream.RowStream`), then a run of at most k steps
(``steps_per_read``) that ends before any row can spend its budget, until every row has stopped;
each step's log row (`step_log`) is kept on the device and read once, at the end. The driver
holds what differs: how a pass's shape is fixed, whether rows that stopped leave, whether the
cache is packed, and what runs a step (`EagerDriver` here, `ladref.batched.program.CapturedDriver`).

`decode_batch` checks every row before any forward pass, caches the prompts, and runs its
`EagerDriver`: the read also brings how many nodes the next pass feeds, whether it feeds a window,
and how far the last step moved the cache's frontier. Rows that stopped leave there (their text
set aside on the device); the next pass is laid out with that shape. Where no draft can pay
(adaptive decoding: `ladref.batched.gate.Gate`, decided on the host from the read), a step feeds
the current tokens alone. Inside a run of k > 1 steps nothing is read: a step feeds every proposed
node (and the window), the frontier moves past the most entries a step can keep, and a row that
stops keeps nothing more until the read drops it. The tokens are those of one read a step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ..call import check_budget, eos_ids, prompt_ids, sync
from ..config import check_int
from ..kernels import sdpa_backends
from ..results import BatchResult, batch_result
from ..rows import per_row
from ..sampling import Processor, check_processor
from ..facts import ModelFacts, check_model, forward_choice
from ..runner import Runner
from .cache import BatchCache
from .gate import Gate
from .runner_cache import RunnerCache
from .source import BatchChoice, BatchSource, FeedAll, remember
from .state import BatchState
from .step import BatchStep, Outcome, Plan
from .stream import RowStream


def check_rows(facts: ModelFacts, prompts: Sequence[object], budgets: Sequence[int], extent: int) -> list[torch.Tensor]:
    """Every row's prompt and budget checked as one prompt's are (`ladref.call`), the error naming the row.

    Raises:
        TypeError, ValueError: ``row b of the batch: <what is wrong>``, before any forward pass.
    """
    checked = []
    for b, (prompt, budget) in enumerate(zip(prompts, budgets)):
        try:
            checked.append(prompt_ids(facts, prompt))
            check_budget(facts, checked[-1].shape[0], budget, extent)
        except (TypeError, ValueError) as err:
            raise type(err)(f"row {b} of the batch: {err}") from None
    return checked


def step_log(outcome: Outcome, cells: int, sources: int) -> torch.Tensor:
    """(B, 3 + 2S) long, what each row's step was: tokens kept, tokens fed, window tokens fed, and per
    source the drafted tokens accepted and whether it had a node fed (`DecodeStats.record_step`)."""
    fed, path = outcome.fed, outcome.verdict.path
    window = outcome.window.long() * cells if outcome.window is not None else torch.zeros_like(outcome.kept)
    if sources == 1:
        credited, present = outcome.verdict.depth[:, None], fed.valid.any(-1, keepdim=True)
    else:
        owner = outcome.merged.drafts.source[fed.node][..., None] == torch.arange(sources, device=path.device)  # (B, w, S)
        credited, present = (owner & path[..., None]).sum(1), (owner & fed.valid[..., None]).any(1)
    return torch.cat([outcome.kept[:, None], (1 + window + fed.valid.sum(-1))[:, None], window[:, None], credited, present], dim=1)


def bare_log(outcome: Outcome, sources: int) -> torch.Tensor:
    """`step_log` of a bare step (`BatchStep.run_bare`): the token kept, one fed, nothing else."""
    return F.pad(torch.stack([outcome.kept, torch.ones_like(outcome.kept)], 1), (0, 1 + 2 * sources))


def decode_batch(model: torch.nn.Module, prompts: Sequence[object], budgets: int | Sequence[int], options: Mapping[str, Any],
                 method: str, sources: Sequence[BatchSource] = (), choice: BatchChoice | None = None,
                 sampler: object | None = None, extent: int = 0, steps_per_read: int = 1, runner: Runner | None = None,
                 processor: Processor | None = None) -> BatchResult:
    """Decode every row of a batch with the batched step until each has stopped.

    Args:
        prompts: B prompts (each a list of ints or a (L,) / (1, L) tensor); budgets: max_new_tokens, one
            for every row or B of them.
        options: the shared keywords (``eos_token_id``, ``tokenizer``, ``streamer``, ``attention_backend``, ``kernels``;
            the sampling ones are read by the caller into `sampler`). A ``streamer`` takes a batch of one
            row (`ladref.batched.stream.RowStream`): it gets the prompt, the row's new tokens at each read,
            then ``end()``; the read then also brings those tokens (a streamer costs nothing else).
        method: each row's `DecodeResult.method`.
        sources: the batch's draft sources (none: greedy decoding or plain sampling).
        choice: what each step feeds; default `FeedAll()`.
        sampler: None for greedy verification, else the batch's sampler.
        extent: positions past the current token a step may touch (checked against the context).
        steps_per_read: k, the steps between two reads from the device (greedy verification only).
        runner: a one-prompt runner to pass through instead of a batch's own cache (`RunnerCache`:
            one row, one read a step; e.g. a `ladref.fast.static.StaticRunner` of compiled widths).
        processor: a transformers logits processor (e.g. a `LogitsProcessorList`) applied to every row's
            root and fed node logits with its own context before verification (`ladref.batched.process`;
            one more read a step); None: none.

    Raises:
        ValueError: a streamer with a batch of several rows (and what `check_rows` refuses), before any forward pass.
        TypeError: a streamer without ``put`` / ``end`` (and what `check_rows` refuses).
    """
    start = time.perf_counter()
    facts, backend = forward_choice(model, options) if runner is None else (check_model(model), "auto")  # a runner's kernels are its own
    check_int("steps_per_read", steps_per_read, 1)
    if steps_per_read > 1 and sampler is not None:
        raise ValueError("steps_per_read > 1 needs greedy verification: a sampled batch reads once a step")
    budgets = per_row("max_new_tokens", budgets, len(prompts))
    for source in sources:
        if not isinstance(source, BatchSource):
            raise TypeError(f"{type(source).__name__} is not a BatchSource (a per-row Proposer runs in a batch through "
                            "ladref.batched.sources.rows.RowProposers, or pass it to draft_decode)")
    rows = check_rows(facts, prompts, budgets, max([extent] + [s.depth for s in sources]))
    tokenizer = options.get("tokenizer")
    eos = eos_ids(model, facts.vocab_size, options.get("eos_token_id"), tokenizer)
    if runner is not None and steps_per_read > 1:
        raise ValueError("a runner's cache commits what each step kept: it reads once a step (steps_per_read=1)")
    cache = BatchCache(model, facts, sdpa_backends(backend, facts.device, facts.attention), len(rows)) if runner is None \
        else RunnerCache(runner)
    state = BatchState.start(rows, budgets, eos, max((s.depth for s in sources), default=0) + 1, facts.device)
    step = BatchStep(cache, sources, FeedAll() if choice is None else choice, sampler, check_processor(processor))
    with torch.inference_mode():
        for source in sources:
            source.begin(state)
        first = None if step.plain else step.plan(state)  # the first drafts, checked before any forward pass
        stream = RowStream(options.get("streamer"), rows)  # sends the prompt
        cache.prefill(rows, backend)
        driver = EagerDriver(step, state, first, steps_per_read, len(sources))
        log, passes = run_batch(driver, step, state, stream, len(sources))
    result = batch_result(rows, driver.finished, log, [s.name for s in sources], start, tokenizer, method, passes + any(len(r) > 1 for r in rows))
    remember(sources, [row.token_ids for row in result])
    return result


class Driver(Protocol):
    """What differs between the eager batch (`EagerDriver`) and the captured one
    (`ladref.batched.program.CapturedDriver`) in `run_batch`: the read's part past the stop flags
    and budgets left (`asks`), what follows from it (`heard`: the most steps until the next read, at
    most `every`, k; 0 when every row has stopped), and a step (`run_step`: its `step_log`, or None)."""

    every: int

    def asks(self, state: BatchState) -> list[torch.Tensor]: ...
    def heard(self, state: BatchState, done: list[int], rest: list[int]) -> int: ...
    def run_step(self, state: BatchState, steps: int, within: bool) -> torch.Tensor | None: ...


def run_batch(driver: Driver, step: BatchStep, state: BatchState, stream: RowStream,
              sources: int) -> tuple[list[list[list[int]]], int]:
    """The one loop of a batch, eager or captured: ONE read, then a run of steps (`within`: all but its
    first), until every row has stopped. A run ends before any row can spend its budget (a step keeps
    at most deepest + 1 tokens), so only an EOS leaves a row idle in one. Returns the step log
    ([step][row] -> `step_log` row; none without sources), read once at the end (the streamer ended),
    and the steps run."""
    reach, steps, size = step.deepest + 1, 0, int(state.budget.max()) + driver.every
    log = None if step.plain else torch.zeros(size, state.size, 3 + 2 * sources, dtype=torch.long, device=state.text.device)
    while True:
        rows = state.size
        read = stream.read([state.done.long(), state.budget - state.produced] + driver.asks(state), state)
        done, left = read[:rows], read[rows : 2 * rows]
        room = driver.heard(state, done, read[2 * rows :])
        if not room:
            stream.end()
            sync(state.text.device)
            return ([] if log is None else log[:steps].tolist()), steps
        run = min([room] + [-(-r // reach) for r, d in zip(left, done) if not d])
        stream.span = min(left[0], run * reach)  # the most the (one) row keeps until the next read
        for within in [False] + [True] * (run - 1):
            logged = driver.run_step(state, steps, within)
            if logged is not None:
                log[steps].index_copy_(0, state.rows, logged)
            steps += 1


class EagerDriver:
    """`decode_batch`'s `Driver`: the next pass's shape read (inside a run of steps: every proposed
    node and the window, the frontier moved past the most a step keeps), rows that stopped leave at
    the read (their text set aside, in `finished`: (time, text) by row), and the `Gate` decides bare
    steps. `first`: the first step's plan (None: plain); `every`: k; `sources`: S."""

    def __init__(self, step: BatchStep, state: BatchState, first: Plan | None, every: int, sources: int) -> None:
        self.step, self.plan, self.every, self.sources, self.cells = step, first, every, sources, step.window_cells or 0
        self.gate = Gate(step.choice, step.deepest, step.window_cells)
        self.live, self.times, self.finished = list(range(state.size)), {}, {}
        self.text, self.length = state.text.clone(), state.length.clone()
        self.owed, self.advance, self.reach, self.shape = False, None, 0, None  # owed: the last step drafted

    def asks(self, state: BatchState) -> list[torch.Tensor]:
        """How far the last step moved the frontier (if it drafted), the next pass's shape (if it drafts), the gate's asks."""
        return ([self.advance] if self.owed else []) + ([] if self.plan is None else [self.plan.shape]) + self.gate.asks(state)

    def heard(self, state: BatchState, done: list[int], rest: list[int]) -> int:
        """The frontier moved, the shape kept, the gate told; the rows that stopped leave."""
        if self.owed:
            self.step.cache.advance(rest.pop(0))
        self.shape = None if self.plan is None else (rest.pop(0), bool(rest.pop(0)))
        self.gate.heard(rest)
        if any(done):
            gone = torch.tensor([i for i, d in enumerate(done) if d], dtype=torch.long, device=self.text.device)
            self.text.index_copy_(0, state.rows[gone], state.text[gone])
            self.length.index_copy_(0, state.rows[gone], state.length[gone])
            self.times.update({row: time.perf_counter() for row, d in zip(self.live, done) if d})
            self.live = [row for row, d in zip(self.live, done) if not d]
            if not self.live:
                texts, lengths = self.text.tolist(), self.length.tolist()
                self.finished = {b: (t, texts[b][: lengths[b]]) for b, t in self.times.items()}
                return 0
            stay = torch.tensor([i for i, d in enumerate(done) if not d], dtype=torch.long, device=self.text.device)
            state.select(stay)
            self.step.select(stay)
            self.plan = None if self.plan is None else self.plan.select(stay)
        return self.every

    def run_step(self, state: BatchState, steps: int, within: bool) -> torch.Tensor | None:
        """One step, at the shape read (`within` a run: every proposed node and the window), or with no
        plan a plain one (a bare one, the sources learning, when the batch drafts); then the gate
        decides whether the next step proposes, and plans it; returns the step's log (None: plain)."""
        step, gate, rows, logged = self.step, self.gate, state.size, None
        if within and self.owed:
            step.cache.advance(self.reach)
        kv = step.cache.attended
        if self.plan is None:
            if step.plain:
                step.run_plain(state)
            else:
                logged = bare_log(step.run_bare(state, gate.observing), self.sources)
            gate.ran(1, rows, kv, False)
            self.owed = False
        else:
            width, window = self.shape if not within else (self.plan.feed.shape[1], step.shape is not None)
            outcome = step.run(state, self.plan, width, window)
            logged = step_log(outcome, self.cells, self.sources)
            gate.ran(1 + width + self.cells * window, rows, kv, True)
            self.owed, self.advance, self.reach = True, outcome.verdict.count.max().view(1), outcome.verdict.entries.shape[1]
        gate.decide(state.size, step.cache.attended)
        self.plan = step.plan(state) if gate.drafting and not step.plain else None
        return logged
