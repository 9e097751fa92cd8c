"""Decoding a batch: the loop that repeats the batched step, its one read a step, and the rows' results.

`decode_batch` checks every row before any forward pass, caches the prompts, then repeats
`ladref.batched.step.BatchStep` until every row has stopped. Between two passes the host reads
ONE small tensor from the device: which rows stopped, how many nodes the next pass feeds, whether
it feeds a window, and how far the last step moved the cache's frontier. Rows that stopped leave
there (their text is set aside on the device); the next pass is laid out with that shape. Each
row's statistics are logged on the device as the steps go and read once, at the end. Where no
draft can pay (adaptive decoding: `ladref.batched.gate.Gate`, decided on the host from what the
read brought), a step proposes nothing and feeds the current tokens alone.

With ``steps_per_read=k`` the host reads once every k steps and the steps between read nothing:
they feed every proposed node (and the window), the frontier moves past the most entries a step
can keep, and a row that stops inside the run keeps nothing more until the read drops it (the
shape of a run of steps captured as one program). A run ends before any row can reach its budget
(each read brings the budgets left), so only an EOS can leave a row idle in a run. The tokens are
the same as with one read a step.

A batch of one row may have a streamer (`ladref.batched.stream.RowStream`): the same read then also
brings the row's length and its new tokens, and the streamer gets them at each read.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..call import check_budget, eos_ids, prompt_ids, sync
from ..config import check_int
from ..kernels import sdpa_backends
from ..results import BatchResult, DecodeResult, DecodeStats
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
        finished, log, passes = _run(step, state, len(sources), first, steps_per_read, stream)
    stream.end()
    sync(facts.device)
    result = _results(rows, finished, log, [s.name for s in sources], start, tokenizer, method, passes + any(len(r) > 1 for r in rows))
    remember(sources, [row.token_ids for row in result])
    return result


def _run(step: BatchStep, state: BatchState, sources: int, first: Plan | None, every: int,
         stream: RowStream) -> tuple[dict[int, tuple[float, list[int]]], list[list[list[int]]], int]:
    """The loop: plan (unless no draft can pay: `Gate`), read (once every `every` steps at most), step,
    until every row has stopped; the streamer gets the row's new tokens at each read. Returns each
    row's (finish time, text) by its index in the batch, the step log ([step][row] -> `step_log` row;
    none without sources) and the steps run."""
    size, cells, device = state.size, step.window_cells or 0, state.text.device
    log = None if step.plain else torch.zeros(int(state.budget.max()) + every, size, 3 + 2 * sources, dtype=torch.long, device=device)
    live, finished, steps, advance, reach, owed = list(range(size)), {}, 0, None, 0, False  # owed: the last step drafted
    out_text, out_length, next_read = state.text.clone(), state.length.clone(), 0
    gate, plan = Gate(step.choice, step.deepest, step.window_cells), first
    while True:
        if steps:
            plan = step.plan(state) if gate.drafting and not step.plain else None
        if steps < next_read:  # inside a run of steps: no read; every proposed node fed, the frontier past the most a step keeps
            if owed:
                step.cache.advance(reach)
            owed, advance, reach = _pass(step, state, plan, None, gate, log, steps, cells, sources)
            steps += 1
            continue
        # The read: which rows stopped, their budgets left, how far the last step moved the frontier (if it drafted),
        # the next pass's shape (if it drafts) and what the gate asks.
        head = [state.done.long(), state.budget - state.produced] + ([advance] if owed else []) + ([] if plan is None else [plan.shape])
        read = stream.read(head + gate.asks(state), state)
        done, left, rest = read[: len(live)], read[len(live) : 2 * len(live)], read[2 * len(live) :]
        if owed:
            step.cache.advance(rest.pop(0))
        shape = None if plan is None else (rest.pop(0), bool(rest.pop(0)))
        gate.heard(rest)
        if any(done):
            leave = [i for i, d in enumerate(done) if d]
            stay = torch.tensor([i for i, d in enumerate(done) if not d], dtype=torch.long, device=device)
            gone = torch.tensor(leave, dtype=torch.long, device=device)
            out_text.index_copy_(0, state.rows[gone], state.text[gone])
            out_length.index_copy_(0, state.rows[gone], state.length[gone])
            for i in leave:
                finished[live[i]] = time.perf_counter()
            live = [row for row, d in zip(live, done) if not d]
            if not live:
                break
            state.select(stay)
            step.select(stay)
            plan = None if plan is None else plan.select(stay)
        # the next read comes before any row can spend its budget (a step keeps at most deepest + 1 tokens)
        next_read = steps + min([every] + [-(-r // (step.deepest + 1)) for r, d in zip(left, done) if not d])
        stream.span = min(left[0], (next_read - steps) * (step.deepest + 1))  # the most the (one) row keeps until then
        owed, advance, reach = _pass(step, state, plan, shape, gate, log, steps, cells, sources)
        steps += 1
    texts, lengths = out_text.tolist(), out_length.tolist()
    return {b: (t, texts[b][: lengths[b]]) for b, t in finished.items()}, ([] if log is None else log[:steps].tolist()), steps


def _pass(step: BatchStep, state: BatchState, plan: Plan | None, shape: tuple[int, bool] | None, gate: Gate,
          log: torch.Tensor | None, steps: int, cells: int, sources: int) -> tuple[bool, torch.Tensor | None, int]:
    """One step, logged: the plan's, at `shape` (read; None inside a run: every proposed node and the
    window), or with no plan a plain one (a bare one, the sources learning, when the batch drafts);
    then the gate decides whether the next step proposes. Returns whether the step drafted, (1,) how
    far it moves the frontier (on the device; None: a plain step moved it) and the most it can."""
    rows, kv = state.size, step.cache.attended
    if plan is None:
        if step.plain:
            step.run_plain(state)
        else:
            log[steps].index_copy_(0, state.rows, bare_log(step.run_bare(state, gate.observing), sources))
        gate.ran(1, rows, kv, False)
        moved = False, None, 0
    else:
        width, window = shape if shape is not None else (plan.feed.shape[1], step.shape is not None)
        outcome = step.run(state, plan, width, window)
        log[steps].index_copy_(0, state.rows, step_log(outcome, cells, sources))
        gate.ran(1 + width + cells * window, rows, kv, True)
        moved = True, outcome.verdict.count.max().view(1), outcome.verdict.entries.shape[1]
    gate.decide(state.size, step.cache.attended)
    return moved


def _results(prompts: Sequence[torch.Tensor], finished: dict, log: list, names: Sequence[str], start: float, tokenizer: Any,
             method: str, passes: int) -> BatchResult:
    """Each row's `DecodeResult`, from its text and its rows of the step log; `passes`: the batch's."""
    results = []
    for b, prompt in enumerate(prompts):
        end, text = finished[b]
        stats = DecodeStats(prefill_tokens=prompt.shape[0] - 1, wall_time_s=end - start)
        # a row's steps: those in which it kept a token (a stopped row inside a run of steps keeps none)
        entries = [logged[b] for logged in log if logged[b][0] > 0] if log else [(1, 1, 0)] * (len(text) - prompt.shape[0])
        for entry in entries:
            kept, fed, window = entry[:3]
            stats.record(kept, fed, window)
            step: dict[str, list[int]] = {}  # sources of one name count as one (a tree's nodes are named)
            for source, credited, present in zip(names, entry[3 : 3 + len(names)], entry[3 + len(names):]):
                seen = step.setdefault(source, [0, 0])
                seen[0], seen[1] = seen[0] + credited, seen[1] or present
            for source, (credited, present) in step.items():
                if present:
                    stats.accepted_by_source.setdefault(source, Counter())[credited] += 1
        tokens = text[prompt.shape[0]:]
        results.append(DecodeResult(tokens, tokenizer.decode(tokens, skip_special_tokens=True) if tokenizer is not None else None,
                                    stats, method))
    return BatchResult(results, passes)
