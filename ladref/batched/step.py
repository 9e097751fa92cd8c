"""One step of a batch, for every row at once: the one-prompt step (`ladref.step`) as a tensor program.

1. propose: every source's drafts for every row, merged into one trie per row (`plan`);
2. choose: which nodes, and whether the window, each row feeds (`ladref.batched.source.BatchChoice`);
   the loop then reads the pass's width from the device, its one read a step;
3. one forward pass over every row's ``[current | window | nodes]`` (`run`);
4. verify: every row's longest path greedy agrees with, plus one token (or sampled);
5. commit: each row's accepted entries in the cache, its kept tokens in its text, its stop;
6. learn: every source, then the choice, sees the `Outcome`.

No step loops over rows or reads a tensor back: the shapes come from the host (the width read in
2, the frontier), everything else stays on the model's device. A step with nothing to draft
(greedy decoding, plain sampling) is `run_plain`: the current tokens alone. A step of a drafting
batch where no draft can pay (`ladref.batched.policy.BatchPolicy.may_draft`) is `run_bare`: the
current tokens alone too, skipping 1-2, and every source still learns from it (steps 5-6), as the
one-prompt loop's sources learn from a `ladref.step.plain_step`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .cache import BatchCache
from .drafts import Drafts, Fed, Merged, ancestor_table, compact, merge
from .layout import WindowShape, step_inputs
from .process import Processor, process
from .source import BatchChoice, BatchSource, Outcome
from .state import BatchState
from .verify import Verdict, verify_greedy


def nothing_fed(token: torch.Tensor, depth: int) -> tuple[Merged, Fed, Verdict]:
    """The merged proposals (none), fed nodes (none) and verdict (the (B,) `token`, one a row) of a
    step that proposed nothing (`BatchStep.run_bare`); `depth`: the deepest a node can be."""
    rows, device = token.shape[0], token.device
    none = torch.zeros(rows, 0, dtype=torch.long, device=device)  # (B, 0)
    flag, pairs = none.bool(), torch.zeros(rows, 0, 0, dtype=torch.bool, device=device)  # (B, 0), (B, 0, 0)
    drafts = Drafts(none, none[0], flag, none[0], none, True)
    table = torch.zeros(rows, 0, max(depth, 1), dtype=torch.long, device=device)  # (B, 0, D)
    merged = Merged(drafts, table, flag, none, none, table)
    zero = torch.zeros_like(token)
    return merged, Fed(merged, none, flag, none, pairs, none), Verdict(token[:, None], zero + 1, zero[:, None], zero, flag)


@dataclass(frozen=True, eq=False)
class Plan:
    """What the next step feeds (steps 1-2), before the host knows its shape.

    Attributes:
        merged: every source's proposals, merged; feed: (B, n) bool, the nodes each row feeds.
        window: (B,) bool, the rows feeding their window.
        shape: (2,) long, [the most nodes a row still decoding feeds, whether any such row feeds its window].
        parts: each source's slots among the n.
    """

    merged: Merged
    feed: torch.Tensor
    window: torch.Tensor
    shape: torch.Tensor
    parts: list[slice]

    def select(self, keep: torch.Tensor) -> "Plan":
        """The plan of the rows `keep` (in order)."""
        return Plan(self.merged.select(keep), self.feed.index_select(0, keep), self.window.index_select(0, keep), self.shape,
                    self.parts)


class BatchStep:
    """A batch's step over its cache, sources and choice (the parts that do not change from step to step).

    Args:
        cache: the batch's `BatchCache`.
        sources: the `BatchSource` s, their slots in this order (at least one).
        choice: what each step feeds.
        sampler: None for greedy verification, else the batch's `ladref.batched.sample.BatchSampler`.
        processor: a transformers logits processor applied to the root's and every fed node's logits
            before verification, each with its own context (`ladref.batched.process`); None: none.
    """

    def __init__(self, cache: BatchCache, sources: Sequence[BatchSource], choice: BatchChoice,
                 sampler: object | None = None, processor: Processor | None = None) -> None:
        self.cache, self.sources, self.choice, self.sampler = cache, list(sources), choice, sampler
        self.processor = processor
        self.deepest = max((s.depth for s in self.sources), default=0)
        self.topk = max((s.topk for s in self.sources), default=0)
        self.windowed = next((s for s in self.sources if s.window is not None), None)
        device = cache.facts.device
        self.shape = None if self.windowed is None else WindowShape.of(*self.windowed.window, device)
        self.first = torch.zeros(1, dtype=torch.long, device=device)  # the step position of the current token
        self.static: torch.Tensor | None = None  # (1, n, D) the ancestor table of sources whose trees keep one shape

    @property
    def plain(self) -> bool:
        """Whether there is nothing to draft (greedy decoding, plain sampling): one token a row and step."""
        return not self.sources

    @property
    def window_cells(self) -> int | None:
        return None if self.shape is None else self.shape.length - 1

    def plan(self, state: BatchState) -> Plan:
        """Steps 1-2: propose, merge and choose, for every row."""
        proposals = [source.propose(state) for source in self.sources]
        parts, start = [], 0
        for proposal in proposals:
            parts.append(slice(start, start + proposal.width))
            start += proposal.width
        drafts = Drafts.cat(proposals)
        merged = merge(drafts, self._table(drafts))
        feed, window = self.choice.choose(merged, state, self.window_cells, self.cache.attended)
        live = ~state.done
        window = window & live if self.shape is not None else live & False
        return Plan(merged, feed, window, torch.stack([(feed.sum(-1) * live).max(), window.any().long()]), parts)

    def _table(self, drafts: Drafts) -> torch.Tensor:
        """(B, n, D) the drafts' `ancestor_table`: computed once for trees of a fixed shape ((n,) parents)."""
        rows, depth = drafts.tokens.shape[0], max(self.deepest, 1)
        if drafts.parents.dim() == 2:
            return ancestor_table(drafts.parents, depth)
        if self.static is None:
            self.static = ancestor_table(drafts.parents[None], depth)
        return self.static.expand(rows, *self.static.shape[1:])

    def run_plain(self, state: BatchState) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """A step with nothing to verify: each row's current token alone, its argmax (or a draw) kept,
        after the processor if any. Returns (B, 1, V) the pass's logits, (B, 1) their argmax (None
        when sampling) and (B,) the tokens kept."""
        logits = self.cache.forward(state.current[:, None], state.length[:, None] - 1, None, self.first)  # (B, 1, V)
        preds = logits.argmax(-1) if self.sampler is None else None
        if self.processor is None:
            token = preds[:, 0] if preds is not None else self.sampler.sample(logits[:, 0])
        else:
            scores = process(self.processor, state.text, state.length, logits[:, 0])[0]  # (B, V)
            token = scores.argmax(-1) if self.sampler is None else self.sampler.sample(scores)
        state.accept_one(token)
        self.cache.commit_one()  # the token's entry is committed where the pass wrote it
        return logits, preds, token

    def run_bare(self, state: BatchState, observe: bool = True) -> Outcome:
        """`run_plain` in a drafting batch, nothing proposed: every source learns from the step's
        `Outcome` (no node, no window: the current token, its argmax and top-k, the token kept), and
        the choice when `observe` (while proposals it made may still be pending)."""
        ids, live = state.current[:, None].clone(), ~state.done  # (B, 1): the one token fed; the rows keeping one
        logits, preds, token = self.run_plain(state)
        preds = logits.argmax(-1) if preds is None else preds  # (B, 1)
        top = logits.topk(self.topk, dim=-1).indices if self.topk else None
        outcome = Outcome(ids, preds, top, 1, None, *nothing_fed(token, self.deepest), live.long())
        for source in self.sources:
            source.learn(state, outcome, slice(0, 0))
        if observe:
            self.choice.observe(state, outcome)
        return outcome

    def run(self, state: BatchState, plan: Plan, width: int, window: bool) -> Outcome:
        """Steps 3-6 for a plan whose shape the host has read: `width` nodes, the window or not."""
        fed = compact(plan.merged, plan.feed, width)
        shape = self.shape if window else None
        ids, positions, allowed = step_inputs(state.current, state.length - 1, fed, shape,
                                              None if shape is None else self.windowed.grid)
        length = ids.shape[1] - width
        keep = self._keep(ids.shape[1], length, shape)
        logits = self.cache.forward(ids, positions, allowed, keep)  # (B, k, V)
        preds = logits.argmax(-1)
        if not self.topk:  # the positions kept: the current token, the window's newest row, the nodes
            preds = torch.full(ids.shape, -1, dtype=torch.long, device=ids.device).index_copy_(1, keep, preds)
        top = logits.topk(self.topk, dim=-1).indices if self.topk else None  # every position kept when asked
        if self.processor is not None:  # the sources still learn from the model's own argmax (preds), as in the reference
            root, nodes = process(self.processor, state.text, state.length, logits[:, 0], logits[:, logits.shape[1] - width:],
                                  fed)  # (B, V), (B, w, V)
            verdict = self.sampler.verify(root, nodes, fed, length, self.deepest) if self.sampler is not None else \
                verify_greedy(root.argmax(-1), nodes.argmax(-1), fed, length, self.deepest)
        elif self.sampler is None:
            verdict = verify_greedy(preds[:, 0], preds[:, length:], fed, length, self.deepest)
        else:
            verdict = self.sampler.verify(logits[:, 0], logits[:, logits.shape[1] - width:], fed, length, self.deepest)
        kept = state.accept(verdict.tokens, verdict.count)
        self.cache.commit(verdict.entries, kept)  # the entries of the tokens kept: none for a stopped row, none past a cut
        outcome = Outcome(ids, preds, top, length, plan.window if window else None, plan.merged, fed, verdict, kept)
        for source, part in zip(self.sources, plan.parts):
            source.learn(state, outcome, part)
        self.choice.observe(state, outcome)
        return outcome

    def _keep(self, q: int, length: int, shape: WindowShape | None) -> torch.Tensor:
        """The step positions whose logits are computed: every one when a source asks for the top-k,
        else the current token's, the window's newest row's and the nodes'."""
        device = self.cache.facts.device
        if self.topk:
            return torch.arange(q, device=device)
        window = shape.last_row if shape is not None else self.first[:0]
        return torch.cat([self.first, window, torch.arange(length, q, device=device)])

    def select(self, keep: torch.Tensor) -> None:
        """Rows `keep` stay: the cache, the sources and the choice keep only them."""
        self.cache.select(keep)
        for source in self.sources:
            source.select(keep)
        self.choice.select(keep)
