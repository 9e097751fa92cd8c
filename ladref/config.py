"""Configuration of lookahead decoding (a frozen dataclass, validated on creation)."""

from __future__ import annotations

from dataclasses import dataclass


def check_int(name: str, value: object, low: int) -> None:
    """Raise TypeError unless `value` is an int (bools refused), ValueError unless it is >= `low`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


@dataclass(frozen=True)
class LookaheadConfig:
    """The three knobs of the paper plus the pool options.

    Attributes:
        window_size: W, columns of the 2-D lookahead window (future positions guessed per step).
        ngram_size: N, length of the n-grams harvested and verified; the window keeps N-1 rows.
            N=2 makes the lookahead branch a plain Jacobi iteration over W tokens.
        max_candidates: G, the most pool n-grams verified per step (0 turns verification off,
            which leaves one greedy token per step).
        pool_from_prompt: seed the n-gram pool with every n-gram of the prompt.
        pool_capacity: n-grams kept per first token (most recently added first); None means
            max(G, 1), as in the reference implementation.

    A step feeds (N-1) * (W + g) tokens to the model, g <= G being the candidates found.
    """

    window_size: int = 4
    ngram_size: int = 4
    max_candidates: int = 4
    pool_from_prompt: bool = True
    pool_capacity: int | None = None

    def __post_init__(self) -> None:
        check_int("window_size (W)", self.window_size, 1)
        check_int("ngram_size (N)", self.ngram_size, 2)
        check_int("max_candidates (G)", self.max_candidates, 0)
        if not isinstance(self.pool_from_prompt, bool):
            raise TypeError(f"pool_from_prompt must be a bool, got {type(self.pool_from_prompt).__name__}")
        if self.pool_capacity is not None:
            check_int("pool_capacity", self.pool_capacity, 1)

    @property
    def capacity(self) -> int:
        """Effective n-grams kept per key."""
        return self.pool_capacity if self.pool_capacity is not None else max(self.max_candidates, 1)

    def max_step_tokens(self) -> int:
        """Most tokens one step feeds the model: (N-1) * (W + G) (a trie of the G n-grams may need fewer)."""
        return (self.ngram_size - 1) * (self.window_size + self.max_candidates)

    def step_extent(self) -> int:
        """Positions past the last committed token a step may touch (`window_reach`)."""
        return window_reach(self.window_size, self.ngram_size)


def window_reach(window_size: int, ngram_size: int) -> int:
    """Positions past the last committed token a lookahead step may touch, W + N: a bound (the
    window's last cell sits W + N - 3 past the current token, the deepest draft N - 1)."""
    return window_size + ngram_size
