"""The n-gram pool: n-grams seen so far, keyed by their first token.

Each key keeps at most `capacity` continuations (the n-gram minus its first token), in
most-recently-added order: adding an n-gram that is already there moves it to the front, and a
full key drops its least recently added n-gram. Only adding refreshes an entry: reading a key's
candidates, or accepting one of them, leaves the order as it is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

import torch


class NGramPool:
    """n-grams of size N keyed by their first token.

    Args:
        ngram_size: N, tokens per n-gram (>= 2).
        capacity: continuations kept per key (>= 1).
    """

    def __init__(self, ngram_size: int, capacity: int) -> None:
        if ngram_size < 2:
            raise ValueError(f"ngram_size (N) must be >= 2, got {ngram_size}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.ngram_size = ngram_size
        self.capacity = capacity
        self._by_key: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_key.values())

    def __contains__(self, ngram: Sequence[int]) -> bool:
        key, rest = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        return rest in self._by_key.get(key, ())

    def add(self, ngram: Sequence[int]) -> None:
        """Insert (or refresh) one n-gram of exactly N tokens."""
        if len(ngram) != self.ngram_size:
            raise ValueError(f"expected an n-gram of N = {self.ngram_size} tokens, got {len(ngram)}")
        key, rest = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        entries = self._by_key.setdefault(key, OrderedDict())
        entries[rest] = None
        entries.move_to_end(rest, last=False)  # most recent first
        if len(entries) > self.capacity:
            entries.popitem(last=True)  # drop the least recently added

    def add_all(self, ngrams: Iterable[Sequence[int]]) -> None:
        for ngram in ngrams:
            self.add(ngram)

    def seed_from_tokens(self, tokens: Sequence[int]) -> None:
        """Add every n-gram of a token sequence (e.g. the prompt), later ones ending most recent."""
        tokens = [int(t) for t in tokens]
        self.add_all(tokens[i : i + self.ngram_size] for i in range(len(tokens) - self.ngram_size + 1))

    def harvest(self, window: torch.Tensor, new_row: torch.Tensor) -> list[tuple[int, ...]]:
        """Add the W n-grams read down the columns of the lookahead trajectory.

        Column c of ``[window; new_row]`` holds tokens at consecutive positions p+c .. p+c+N-1,
        each produced by the model from the ones before it: one n-gram per column (the paper's
        diagonals, since each window row is shifted one position right of the row above).

        Args:
            window: (N-1, W) the window the step was run on (cell (0, 0) = current token).
            new_row: (W,) the lookahead branch's predictions of this step.

        Returns:
            The W harvested n-grams, column by column.
        """
        grid = torch.cat([window, new_row[None]], dim=0)  # (N, W)
        ngrams = [tuple(col) for col in grid.t().tolist()]
        self.add_all(ngrams)
        return ngrams

    def candidates(self, token: int, limit: int) -> torch.Tensor:
        """Up to `limit` continuations of `token`, most recent first.

        Returns:
            (g, N-1) long tensor, g = min(limit, stored continuations).
        """
        entries = list(self._by_key.get(int(token), ()))[:limit]
        if not entries:
            return torch.empty(0, self.ngram_size - 1, dtype=torch.long)
        return torch.tensor(entries, dtype=torch.long)
