"""Jacobi decoding: guess a block of future tokens and re-predict all of them in one pass.

Greedy decoding is the fixed point y_i = argmax p(y_i | y_<i, x). One Jacobi iteration feeds
``[current, g_1 .. g_m]`` and reads the argmax after each token, ``o_0 .. o_m``. o_0 is exact;
every guess g_i that equals o_{i-1} (with all guesses before it) has converged, and then o_i is
exact too. We commit that converged prefix plus the first exact prediction after it, shift the
rest of the predictions into the next guess, and iterate: at least one token per pass, and the
same tokens as greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import check_int
from ..proposer import DraftSource, StepOutcome
from ..runner import Runner
from ..tree import DraftTree


def jacobi_iteration(runner: Runner, current: int, guess: torch.Tensor) -> torch.Tensor:
    """One parallel forward over ``[current, guess]`` (causal).

    Args:
        current: the last committed token.
        guess: (m,) guessed next tokens.

    Returns:
        (m+1,) predictions: entry i is the argmax after ``[current, g_1..g_i]``.
    """
    ids = torch.cat([torch.tensor([current]), guess])
    return runner.forward(ids).argmax(dim=-1).cpu()


def converged_prefix(guess: torch.Tensor, preds: torch.Tensor) -> int:
    """k = leading guesses equal to the predictions before them (g_i == o_{i-1} for i <= k)."""
    return int((guess == preds[:-1]).long().cumprod(dim=0).sum())


def next_guess(preds: torch.Tensor, k: int, m: int) -> torch.Tensor:
    """The unconverged predictions o_{k+1}.. o_m, padded with the last one to m tokens."""
    rest = preds[k + 1 :]
    if rest.numel() == 0:
        rest = preds[-1:]
    return torch.cat([rest, rest[-1:].expand(m - rest.numel())])


class JacobiProposer(DraftSource):
    """Jacobi decoding as a draft source: the previous iteration's unconverged predictions, as a chain.

    Args:
        block_size: m, guessed tokens per step (each step feeds m + 1 tokens).
    """

    name = "jacobi"

    def __init__(self, block_size: int = 8) -> None:
        check_int("block_size", block_size, 1)
        self.block_size = block_size
        self.guess = torch.zeros(block_size, dtype=torch.long)

    def begin(self, prompt: Sequence[int]) -> None:
        """The first guess: the prompt's last m tokens (cycled when the prompt is shorter)."""
        m = self.block_size
        self.guess = torch.as_tensor(list(prompt), dtype=torch.long)[-m:].repeat(m)[:m]

    def propose(self, context: Sequence[int]) -> DraftTree:
        return DraftTree.from_paths([self.guess.tolist()], self.name)

    def learn(self, outcome: StepOutcome) -> None:
        """Shift the predictions after the k converged guesses into the next guess."""
        chain = outcome.tree.find_path(self.guess.tolist())  # this proposer's nodes in the step's tree
        preds = torch.cat([torch.tensor([outcome.root_pred]), outcome.node_preds[chain]])  # (m+1,) o_0 .. o_m
        k = min(len(outcome.path), len(chain))
        self.guess = next_guess(preds, k, self.block_size)
