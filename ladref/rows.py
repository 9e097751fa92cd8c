"""A batch, row by row: its prompts, its per-row arguments, each row's own generator, and the
threads that decode the rows (`decode_rows`).

Every decoder hands a batch to `decode_rows`, which turns what the decoder was given into what
each row gets and runs each row's decoding loop in a thread of its own, over the
`ladref.batch.BatchRunner` that meets their forward passes in one.

Each row's thread runs its own torch work on one thread (`row_threads`). Row threads whose ops
ran on OpenMP teams of their own left the process with more OpenMP threads than cores, and GNU
OpenMP then stops spinning between parallel regions for every team, the passes' too: on a 2-core
CPU a pass of 2 greedy rows took 106 ms beside such threads, 56 ms without them
(benchmarks/results/load/row_threads.log).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from .batch import BatchRunner, RowRunner
from .results import BatchResult, DecodeResult
from .runner import Runner, check_model
from .types import TokenIds

OneCall = Callable[[Runner | None, TokenIds, int, Mapping[str, Any]], DecodeResult]


def batch_prompts(input_ids: object, attention_mask: object = None) -> list[TokenIds] | None:
    """The prompts of a batch (a list of prompts, or a (B, L) tensor with B > 1), or None for one prompt.

    A (B, L) tensor's rows are cut to their `attention_mask` (1: a token, 0: padding, on the left
    or on the right); without one, every row is a whole prompt.

    Raises:
        TypeError, ValueError: a mask without a tensor, of another shape, or with holes inside a row.
    """
    if isinstance(input_ids, (list, tuple)) and input_ids and all(isinstance(p, (list, tuple, torch.Tensor)) for p in input_ids):
        if attention_mask is not None:
            raise ValueError("attention_mask goes with a (B, L) tensor; a list of prompts needs none (rows may differ in length)")
        return list(input_ids)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or (input_ids.shape[0] == 1 and attention_mask is None):
        if attention_mask is not None and not isinstance(input_ids, torch.Tensor):
            raise TypeError("attention_mask goes with a (B, L) tensor of prompts")
        return None
    if attention_mask is None:
        return list(input_ids)
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(input_ids.shape)}, got {shape}")
    prompts = []
    for b, (row, keep) in enumerate(zip(input_ids, attention_mask.bool())):
        where = keep.nonzero().flatten()
        if len(where) and where[-1] - where[0] + 1 != len(where):
            raise ValueError(f"attention_mask row {b} has padding between tokens; pad on the left or on the right only")
        prompts.append(row[where])
    return prompts


def per_row(name: str, value: object, rows: int) -> list:
    """`value` for each of `rows` rows: one value for all, or a list of one per row."""
    if isinstance(value, (list, tuple)):
        if len(value) != rows:
            raise ValueError(f"{name} has {len(value)} values for a batch of {rows} prompts")
        return list(value)
    return [value] * rows


def row_options(options: Mapping[str, Any], rows: int) -> list[dict[str, Any]]:
    """Each row's keywords: the same, but a sampling generator becomes one generator per row, seeded
    from it in row order (rows run concurrently: their draws must not depend on who draws first)."""
    if options.get("streamer") is not None:
        raise ValueError("a streamer follows one sequence; decode a batch without one")
    base = {k: v for k, v in options.items() if k != "attention_mask"}
    generator = base.get("generator")
    if generator is None:
        return [base] * rows
    seeds = torch.randint(2**62, (rows,), generator=generator).tolist()
    return [{**base, "generator": torch.Generator().manual_seed(seed)} for seed in seeds]


def decode_rows(model: torch.nn.Module, input_ids: TokenIds, max_new_tokens: int | Sequence[int], options: Mapping[str, Any],
                one: OneCall) -> DecodeResult | BatchResult:
    """``one(None, input_ids, max_new_tokens, options)`` for one prompt; for a batch, ``one`` for each
    row, in threads, through `RowRunner`s whose forward passes `BatchRunner` runs as one.

    Args:
        one: decodes one prompt (runner None: a fresh `ModelRunner`) and returns its `DecodeResult`.
        max_new_tokens: for a batch, one budget for every row or a list of one per row.

    Returns:
        A `DecodeResult`, or a `BatchResult` with one per row, in the batch's order.
    """
    prompts = batch_prompts(input_ids, options.get("attention_mask"))
    if prompts is None:
        return one(None, input_ids, max_new_tokens, {k: v for k, v in options.items() if k != "attention_mask"})
    if not prompts:
        raise ValueError("the batch is empty")
    budgets, settings = per_row("max_new_tokens", max_new_tokens, len(prompts)), row_options(options, len(prompts))
    batch = BatchRunner(model, check_model(model), len(prompts), options.get("attention_backend", "auto"))
    results: list[DecodeResult | None] = [None] * len(prompts)
    threads = torch.get_num_threads()  # the passes' (this thread's), read here first: see `row_threads`

    def run(b: int) -> None:
        error = None
        batch.host.acquire()  # one row's host work at a time: see `BatchRunner`
        try:
            with torch.inference_mode(), row_threads(threads):  # thread-local: each row's thread enters them
                results[b] = one(batch.rows[b], prompts[b], budgets[b], settings[b])
        except BaseException as err:  # noqa: BLE001 (handed to the caller's thread below)
            error = err
        batch.leave(batch.rows[b], error)

    rows = [threading.Thread(target=run, args=(b,), name=f"ladref-row-{b}") for b in range(len(prompts))]
    for row in rows:
        row.start()
    batch.serve()  # every pass, in this thread
    for row in rows:
        row.join()
    if batch.error is not None:
        raise batch.error
    return BatchResult(results, batch.passes)


@contextlib.contextmanager
def row_threads(restore: int) -> Iterator[None]:
    """Within a row's thread: its torch ops on one thread; on leaving, torch's count back to `restore`.

    torch has no per-thread setting: ``torch.set_num_threads`` sets the calling thread's OpenMP
    thread count and the default of threads that start their first parallel op later, so the
    caller's count (`restore`, read in the passes' thread before any row starts) is set back. The
    thread's own count is set up first (``get_num_threads``), so that a row leaving meanwhile cannot
    hand it the caller's.
    """
    torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(restore)


def copy_for_row(proposers: Sequence[Any], runner: Runner | None) -> list[Any]:
    """The proposers themselves for one prompt; a deep copy for each row of a batch (they hold state)."""
    return list(proposers) if runner is None or not isinstance(runner, RowRunner) else copy.deepcopy(list(proposers))
