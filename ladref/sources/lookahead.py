"""Lookahead decoding (Fu et al., ICML 2024): the 2-D window and its n-gram pool, as a proposer.

Each step runs ONE forward pass over ``[current | window (N-1, W) | draft tree]`` (`ladref.step`):
  * the lookahead branch makes one Jacobi iteration of the 2-D window (`LookaheadWindow`): the
    newest row's predictions become a new row, and from the (N-1)-th step on (once the rows below
    the first are the model's) each column of (old window + new row) is an n-gram for the pool;
  * the verification branch checks up to G pool n-grams that start with the current token,
    merged into a trie (`LookaheadProposer`), and accepts the longest one greedy decoding agrees
    with, plus the model's own next token.
The output is therefore exactly greedy's, with 1..N tokens per step.

With ``do_sample=True`` the verification branch instead samples along the tree, accepting drafts
by rejection sampling (`ladref.sampling`): the output is then distributed exactly as ordinary
sampling. The lookahead branch stays greedy in both cases: it only proposes drafts, and
verification alone decides what is emitted (docs/sampling.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import LookaheadConfig, check_int
from ..proposer import DraftSource, StepOutcome
from ..tree import DraftTree
from .ngram_pool import NGramPool


class LookaheadWindow:
    """The lookahead branch: N-1 rows of past Jacobi iterations over W columns.

    Args:
        window_size: W, columns (future positions guessed per step).
        ngram_size: N; the window keeps N-1 rows.

    Attributes:
        grid: (N-1, W) long, oldest row first; cell (r, c) is fed at position p + r + c.
        steps: steps fed so far in this call.
    """

    def __init__(self, window_size: int, ngram_size: int) -> None:
        check_int("window_size (W)", window_size, 1)
        check_int("ngram_size (N)", ngram_size, 2)
        self.window_size, self.ngram_size = window_size, ngram_size
        self.grid = torch.zeros(ngram_size - 1, window_size, dtype=torch.long)
        self.steps = 0

    def start(self, prompt: Sequence[int]) -> None:
        """Fill the window with the prompt's last (N-1)*W tokens (cycled when the prompt is shorter)."""
        cells = (self.ngram_size - 1) * self.window_size
        tail = torch.as_tensor(list(prompt), dtype=torch.long)[-cells:]
        self.grid = tail.repeat(cells)[:cells].view(self.ngram_size - 1, self.window_size).clone()
        self.steps = 0

    def advance(self, fed: torch.Tensor, new_row: torch.Tensor) -> torch.Tensor | None:
        """Slide by one row after a step; returns the trajectory to harvest, if it is the model's.

        Args:
            fed: ((N-1)*W,) the window as fed (cell (0, 0) replaced by the current token).
            new_row: (W,) the model's predictions after the newest row.

        Returns:
            (N, W) ``[fed window; new_row]``, whose columns are n-grams, once every row below the
            first came from the model (from step N-1 on); None before.
        """
        window = fed.view(self.ngram_size - 1, self.window_size)
        trajectory = torch.cat([window, new_row[None]])
        harvest = trajectory if self.steps >= self.ngram_size - 2 else None
        self.grid = trajectory[1:].clone()
        self.steps += 1
        return harvest


class LookaheadProposer(DraftSource):
    """The paper's draft source: an n-gram pool fed by the lookahead window (and the prompt).

    Args:
        config: W, N, G and the pool options.

    Attributes:
        window: the `LookaheadWindow` every step feeds.
        pool: the `NGramPool`, fresh for every call.
    """

    name = "lookahead"

    def __init__(self, config: LookaheadConfig) -> None:
        if not isinstance(config, LookaheadConfig):
            raise TypeError(f"config must be a LookaheadConfig, got {type(config).__name__}")
        self.config = config
        self.window = LookaheadWindow(config.window_size, config.ngram_size)
        self.pool = NGramPool(config.ngram_size, config.capacity)

    def begin(self, prompt: Sequence[int]) -> None:
        self.window.start(prompt)
        self.pool = NGramPool(self.config.ngram_size, self.config.capacity)
        if self.config.pool_from_prompt:
            self.pool.seed_from_tokens(prompt)

    def propose(self, context: Sequence[int]) -> DraftTree:
        """Up to G pool n-grams that start with the current token, as a trie."""
        candidates = self.pool.candidates(context[-1], self.config.max_candidates)  # (g, N-1)
        return DraftTree.from_paths(candidates.tolist(), self.name)

    def learn(self, outcome: StepOutcome) -> None:
        """Add the W n-grams read down the window's columns (once they are the model's)."""
        if outcome.harvest is not None:
            self.pool.harvest(outcome.harvest[:-1], outcome.harvest[-1])
