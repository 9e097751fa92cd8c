"""The paper's lookahead branch for every row of a batch: the (B, N-1, W) window and the device n-gram pool.

The batch form of `ladref.sources.lookahead.LookaheadProposer`: each row's window is its
`LookaheadWindow` (the prompt's last (N-1) W tokens to start, cycled when shorter), its pool its
`NGramPool` (`ladref.batched.sources.pool.BatchPool`). A step proposes, for every row, the G most
recent continuations of its current token as G chains of N-1 nodes (the merge of
`ladref.batched.drafts` shares their common prefixes, as the reference's trie does); after it,
the rows that fed their window slide it by one row, and from step N-1 on harvest its W columns
into their pool, all rows at once.
"""

from __future__ import annotations

import torch

from ...config import LookaheadConfig
from ...sources.lookahead import LookaheadProposer
from ..drafts import Drafts
from ..forms import BatchForm
from ..source import Outcome
from ..state import BatchState
from .pool import BatchPool


class BatchLookahead(BatchForm, reference=LookaheadProposer, fixed_shape=True):
    """Lookahead decoding's draft source for a batch: window, pool and G candidate chains.

    Args:
        config: W, N, G and the pool options.
        vocab_size: V, the keys of the pool.

    Attributes:
        window: ``(W, N)``; grid: (B, N-1, W) long, each row's window, oldest row first.
        steps: (B,) long, the steps each row has fed its window.
        pool: the rows' `BatchPool`.
    """

    name, topk = "lookahead", 0

    def __init__(self, config: LookaheadConfig, vocab_size: int) -> None:
        if not isinstance(config, LookaheadConfig):
            raise TypeError(f"config must be a LookaheadConfig, got {type(config).__name__}")
        self.config, self.vocab_size = config, vocab_size
        self.window = (config.window_size, config.ngram_size)
        self.depth = config.ngram_size - 1
        self.grid = self.steps = self.pool = self.parents = None

    @classmethod
    def from_proposer(cls, proposer: LookaheadProposer, max_depth: int, vocab_size: int) -> BatchLookahead:
        """The batch form of `proposer`: its W, N, G and pool options."""
        return cls(proposer.config, vocab_size)

    def begin(self, state: BatchState) -> None:
        """Every row's window from its prompt, its pool empty or seeded with the prompt's n-grams."""
        (w, n), device = self.window, state.text.device
        cells = (n - 1) * w
        tail = state.length.clamp(max=cells)[:, None]
        at = state.length[:, None] - tail + torch.arange(cells, device=device) % tail
        self.grid = state.text.gather(1, at).view(-1, n - 1, w)
        self.steps = torch.zeros_like(state.length)
        self.pool = BatchPool(state.size, self.vocab_size, n, self.config.capacity, device)
        if self.config.pool_from_prompt:  # (the text past the prompts is masked by their lengths)
            self.pool.seed(state.text, state.prompt_len)
        g = min(self.config.max_candidates, self.config.capacity)
        chain = torch.arange(n - 1, device=device)
        self.parents = torch.where(chain == 0, -1, chain - 1 + (torch.arange(g, device=device) * (n - 1))[:, None]).flatten()

    def propose(self, state: BatchState) -> Drafts:
        """Up to G continuations of each row's current token, G chains of N-1 nodes."""
        tokens, found = self.pool.candidates(state.current, self.config.max_candidates)  # (B, g, N-1), (B, g)
        valid = found[..., None].expand(tokens.shape).flatten(1)
        return Drafts.of(tokens.flatten(1), self.parents, valid, trie=False)

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """The rows that fed their window slide it; from their (N-1)-th such step they harvest its W columns."""
        if outcome.window is None:
            return
        w, n = self.window
        fed = outcome.ids[:, : (n - 1) * w].view(-1, n - 1, w)
        new_row = outcome.preds[:, (n - 2) * w : (n - 1) * w]
        trajectory = torch.cat([fed, new_row[:, None]], dim=1)  # (B, N, W): column c is an n-gram
        harvest = outcome.window & (self.steps >= n - 2)
        self.pool.add(trajectory[:, 0], trajectory[:, 1:].transpose(1, 2), harvest[:, None].expand(-1, w))
        self.grid.copy_(torch.where(outcome.window[:, None, None], trajectory[:, 1:], self.grid))  # in place (`resident`)
        self.steps.add_(outcome.window.long())

    def select(self, keep: torch.Tensor) -> None:
        self.grid, self.steps = self.grid.index_select(0, keep), self.steps.index_select(0, keep)
        self.pool.select(keep)
