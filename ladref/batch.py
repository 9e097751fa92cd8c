"""Decoding a batch: every row runs the loop that decodes one prompt; their forward passes meet in one.

Each row of a batch is decoded by exactly the code that decodes a single prompt (`run_greedy`,
`ladref.step.run_drafting`), in a thread of its own (`ladref.rows.decode_rows`), through a
`RowRunner`: its view of one shared KV cache. A row's forward pass does not run at once. It
waits until every unfinished row has asked for one; then `BatchRunner` runs them all as ONE
forward pass, each row's tokens laid out with its own positions and mask, padded to the widest
row, and hands each row its logits.
So there is one loop, one step and one set of keywords, and a batch of B prompts costs one
forward pass per step of its slowest row, not B.

Ragged acceptance, and the layout of the cache: *per-row lengths over a padded cache*. All rows
share one (B, H, T, D) `DynamicCache`; row b's committed tokens are its first ``length[b]``
slots, and its attention mask hides every slot past them. A step appends Q slots to every row
(Q: the widest row's step); each row's own q entries are moved down to its length at once, and
its accepted ones kept by its own `commit`, as a single prompt's are: both moves are planned by
`ragged_commit_plan` (the pass keeps every row's whole step). Slots no row uses are cut
before the next pass, and a finished row's cache row is dropped there too: rows that finish
leave the work. The first pass, the rows' prompts (a drafting decoder's with its first step:
`Runner.prefill` with ``defer``), runs each row alone and stacks their entries (prompts differ
most in length: padded to the longest, short prompts would pay for the long one). (vLLM keeps a
per-request slot mapping into paged blocks and TensorRT-LLM packs ragged sequences: both avoid
the padding that this layout pays for the clarity of one tensor.)

Exactness: each row's tokens, positions and mask are those of its batch-1 step, so its output
is its batch-1 output, up to the rounding of other GEMM shapes (exact in float64).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .kernels import attention_scope, sdpa_backends
from .runner import ModelFacts, Runner, batch_forward, move_entries, new_cache, stack_caches, trim_cache


@dataclass
class Request:
    """One row's forward pass, waiting for the batch: (q,) ids and positions, a (q, q) mask, (k,) rows kept."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    allowed: torch.Tensor
    keep: torch.Tensor
    logits: torch.Tensor | None = None


class RowRunner(Runner):
    """One row's view of the batch's cache: a `Runner` whose forward waits for the batch's pass."""

    def __init__(self, batch: BatchRunner, row: int) -> None:
        super().__init__(batch.model, facts=batch.facts)
        self.batch, self.row, self.length = batch, row, 0
        self.ready = threading.Event()  # set when the pass with this row's request has run (or the batch failed)
        self.own_width, self.tokens = 1, 1.0  # what a decoder that prices the batch's passes notes (`others`)

    @property
    def past_len(self) -> int:
        return self.length + self.pending_len()

    @property
    def rows(self) -> int:
        return len(self.batch.live) - len(self.batch.done)

    def others(self) -> tuple[float, int]:
        """The other unfinished rows' tokens per step (each the running mean its decoder noted in
        ``tokens``, 1 by default) and the widest step they feed for their own sake (``own_width``)."""
        rows = [r for r in self.batch.live if r is not self and r not in self.batch.done]
        return sum(r.tokens for r in rows), max((r.own_width for r in rows), default=1)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None, allowed: torch.Tensor | None = None,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """As `ModelRunner.forward`, run in the batch's next pass: (k, V) logits of the rows `keep`."""
        input_ids, position_ids, allowed, keep = self.with_pending(input_ids, position_ids, allowed, keep)
        q = input_ids.shape[0]
        request = Request(input_ids.cpu(), (self.length + torch.arange(q)) if position_ids is None else position_ids.cpu(),
                          torch.ones(q, q, dtype=torch.bool).tril_() if allowed is None else allowed.cpu(),
                          torch.arange(q) if keep is None else keep.cpu())
        return self.batch.submit(self, request)

    def commit(self, past_len: int, accepted: torch.Tensor) -> None:
        """As `ModelRunner.commit`, within this row: keep `past_len` slots plus the last step's `accepted`."""
        kept = accepted.tolist()
        if kept == list(range(len(kept))) and len(kept) <= self.length - past_len:  # the step's first k, in place
            self.length = past_len + len(kept)
            return
        rows, sources, targets, lengths = ragged_commit_plan([past_len], past_len, [self.length - past_len], [accepted.cpu()])
        move_entries(self.batch.cache, rows + self.batch.slot(self), sources, targets)
        self.length = int(lengths[0])


class BatchRunner:
    """Runs the rows' forward passes as one, over one shared cache (see the module docstring).

    One thread, the caller's (`serve`), runs every pass, under a lock, once every live row has
    asked for one, while the rows wait: so the cache changes shape (a pass, a finished row
    dropped) only when no row is using it, and every pass runs on the same thread (on a CPU, a
    pass run by a different thread each time would start its own pool of worker threads). Each
    wait wakes only its own thread: the passes' thread when the last row asks (or leaves), each
    row when its pass has run (a shared condition woke every waiting row at every request: B²
    wake-ups, under the GIL, a pass). And the rows' host work between passes runs one row at a
    time (`host`, held from a row's logits to its next request): under the GIL it could not run
    side by side anyway, and rows taking turns at every torch call, each of which may let go of
    the GIL, paid a thread switch each time.

    Args:
        model: the checked model; facts: its `ModelFacts`.
        rows: B, the number of rows (each gets a `RowRunner`).
        attention_backend: the SDPA kernels of every pass (`ladref.kernels.sdpa_backends`).
    """

    def __init__(self, model: torch.nn.Module, facts: ModelFacts, rows: int, attention_backend: str = "auto") -> None:
        self.model, self.facts, self.cache = model, facts, new_cache(model.config)
        self.kernels = sdpa_backends(attention_backend, facts.device, facts.attention)
        self.rows = [RowRunner(self, b) for b in range(rows)]
        self.live = list(self.rows)  # the rows in the cache, in its batch order
        self.done: set[RowRunner] = set()  # rows that have finished, still in the cache until the next pass
        self.waiting: dict[RowRunner, Request] = {}
        self.passes, self.left, self.error = 0, 0, None
        self.turn = threading.Condition()  # the passes' thread waits on it
        self.host = threading.Lock()  # held by the one row whose host work runs (`ladref.rows.decode_rows`, `submit`)

    def slot(self, row: RowRunner) -> int:
        """The row's index in the cache's batch dimension (finished rows are dropped at each pass)."""
        return self.live.index(row)

    def submit(self, row: RowRunner, request: Request) -> torch.Tensor:
        """Wait for the batch's pass that includes `request`; its logits."""
        row.ready.clear()
        with self.turn:  # the batch's error is set under the lock, before any row is told of it
            failed = self.error is not None
            if not failed:
                self.waiting[row] = request
                if self._all_asked():
                    self.turn.notify()
        self.host.release()  # the next row's host work runs while this row waits
        if not failed:
            row.ready.wait()
        self.host.acquire()
        if self.error is not None:
            raise RuntimeError("another row of the batch failed") from self.error
        return request.logits

    def leave(self, row: RowRunner, error: BaseException | None) -> None:
        """A row is done (or failed: the whole batch stops, and no further pass runs)."""
        with self.turn:
            self.error = self.error or error
            self.done.add(row)
            self.left += 1
            self.turn.notify()
        self.host.release()

    def serve(self) -> None:
        """Run the batch's passes in the calling thread, each once every live row has asked, until every row has left."""
        with self.turn:
            while self.left < len(self.rows):
                if self.error is None and self._all_asked():
                    try:
                        self._pass()
                    except BaseException as err:  # the caller re-raises it
                        self.error = err
                    else:
                        for row in self.live:  # each row of the pass: its logits are ready
                            row.ready.set()
                        continue
                if self.error is not None:  # every row waiting learns it (a row asking later: in `submit`)
                    for row in self.rows:
                        row.ready.set()
                self.turn.wait()

    def _all_asked(self) -> bool:
        """Whether every live row has asked for a pass (or finished), and one has: the next pass may run."""
        return bool(self.waiting) and len(self.waiting) + len(self.done) == len(self.live)

    @torch.inference_mode()
    def _pass(self) -> None:
        """One forward pass for every live row: drop finished rows, pad, mask, run, move each row's entries to its length."""
        keep = torch.tensor([b for b, row in enumerate(self.live) if row not in self.done])
        self.live = [row for row in self.live if row not in self.done]
        self.done.clear()
        requests = [self.waiting.pop(row) for row in self.live]
        lengths = [row.length for row in self.live]
        past = max(lengths)
        if self.cache.get_seq_length() > 0:  # slots no row holds any more, and the rows that finished
            trim_cache(self.cache, past, keep if len(keep) < self.cache.layers[0].keys.shape[0] else None)
        device = self.facts.device
        with attention_scope(self.kernels):
            if past == 0:  # the first pass, the rows' prompts: each alone
                picked = self._apart(requests)
            else:
                ids, positions, mask = padded_batch(requests, lengths, past, self.facts.dtype)
                logits = batch_forward(self.model, self.facts, self.cache, ids.to(device), positions.to(device), mask.to(device))  # (B, Q, V)
                picked = [logits[b][request.keep.to(device)] for b, request in enumerate(requests)]
        self.passes += 1
        widths = [request.input_ids.shape[0] for request in requests]
        rows, sources, targets, lengths = ragged_commit_plan(lengths, past, widths, [torch.arange(q) for q in widths])
        move_entries(self.cache, rows, sources, targets)  # every row's step, down to its length
        for b, (row, request) in enumerate(zip(self.live, requests)):
            row.length, request.logits = int(lengths[b]), picked[b]

    def _apart(self, requests: Sequence[Request]) -> list[torch.Tensor]:
        """The first pass, each row's prompt run alone (prompts differ in length: padded to the longest, a
        batch of short prompts would pay for the long one's width), its entries then stacked into the
        shared cache. Returns each row's (k_b, V) logits, of its rows `keep` only (computed only for
        those where the model allows: a prompt's prefill skips the (L, V) head)."""
        caches, logits, device = [], [], self.facts.device
        for request in requests:
            caches.append(DynamicCache(config=self.model.config))
            ids, positions, mask = padded_batch([request], [0], 0, self.facts.dtype)
            logits.append(batch_forward(self.model, self.facts, caches[-1], ids.to(device), positions.to(device), mask.to(device),
                                        request.keep)[0])
        stack_caches(self.cache, caches)
        return logits


def padded_batch(requests: Sequence[Request], lengths: Sequence[int], past: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows' steps padded to the widest, Q tokens, over a cache of `past` slots.

    Row b's query i sees its first ``lengths[b]`` cache slots and the step's slots its own
    (q_b, q_b) mask allows; a padding query sees only itself (a row of -inf would be NaN).

    Returns:
        ids (B, Q) (padding: token 0), positions (B, Q) (padding: 0), mask (B, 1, Q, past + Q) additive.
    """
    width = max(r.input_ids.shape[0] for r in requests)
    ids = torch.zeros(len(requests), width, dtype=torch.long)
    positions = torch.zeros(len(requests), width, dtype=torch.long)
    allowed = torch.zeros(len(requests), width, past + width, dtype=torch.bool)
    for b, (request, length) in enumerate(zip(requests, lengths)):
        q = request.input_ids.shape[0]
        ids[b, :q], positions[b, :q] = request.input_ids, request.position_ids
        allowed[b, :q, :length] = True
        allowed[b, :q, past : past + q] = request.allowed
        allowed[b, torch.arange(q, width), torch.arange(past + q, past + width)] = True
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return ids, positions, mask[:, None]


def ragged_commit_plan(lengths: Sequence[int] | torch.Tensor, past: int, widths: Sequence[int] | torch.Tensor,
                       accepted: Sequence[Sequence[int] | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The moves that commit each row's accepted step entries in a padded (B, H, T, D) cache.

    Row b holds ``lengths[b]`` committed slots, and its step appended ``widths[b]`` entries at
    slots ``past .. past + widths[b] - 1`` (the slots between are padding). Committing moves its
    accepted entries, in path order, to the slots right after its own length.

    Args:
        lengths: (B,) each row's committed slots, none past `past`.
        past: the slot of every row's first step entry.
        widths: (B,) q_b, the entries of row b's step.
        accepted: B (k_b,) step-relative indices, each in [0, q_b), in path order (k_b may be 0).

    Returns:
        rows, sources, targets: (K,) long, K = sum of k_b, row 0's moves first, each row's in
            path order: row ``rows[j]``'s entry at slot ``sources[j]`` goes to slot ``targets[j]``.
        new_lengths: (B,) long, ``lengths[b] + k_b``.

    Raises:
        ValueError: B differs between the arguments, a length passes `past`, or an index lies
            outside its row's step.
    """
    lengths, widths = torch.as_tensor(lengths, dtype=torch.long), torch.as_tensor(widths, dtype=torch.long)
    kept = [torch.as_tensor(a, dtype=torch.long).reshape(-1) for a in accepted]
    # 1. Check the batch: one length, width and accepted list per row, no length past `past`.
    if not len(lengths) == len(widths) == len(kept) or bool((lengths > past).any()):
        raise ValueError(f"a plan takes B lengths <= past ({past}), B widths and B accepted lists")
    # 2. Check that each row's accepted indices lie in its own step: 0 <= i < widths[b].
    if any(len(a) and (int(a.min()) < 0 or int(a.max()) >= q) for a, q in zip(kept, widths.tolist())):
        raise ValueError(f"an accepted index lies outside its row's step (widths {widths.tolist()})")
    # 3. Row b's j-th accepted entry moves from slot past + accepted[b][j] to slot lengths[b] + j.
    counts, none = torch.tensor([len(a) for a in kept], dtype=torch.long), torch.zeros(0, dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(kept)), counts)
    targets = torch.cat([none, *(int(n) + torch.arange(len(a)) for n, a in zip(lengths, kept))])
    # 4. Each row's new length: its committed slots plus its accepted entries.
    return rows, past + torch.cat([none, *kept]), targets, lengths + counts
