"""Jacobi decoding's guess for every row of a batch: a (B, m) chain, shifted on the device after each step.

The batch form of `ladref.sources.jacobi.JacobiProposer`: each row drafts its m guessed tokens as
one chain; after a step, the guesses that converged (equal to greedy's tokens, as far as they
were fed) are dropped and the predictions after them become the next guess, padded with the last
prediction (`ladref.sources.jacobi.next_guess`, row by row as one gather).
"""

from __future__ import annotations

import torch

from ...config import check_int
from ...sources.jacobi import JacobiProposer
from ..drafts import Drafts
from ..forms import BatchForm
from ..source import Outcome
from ..state import BatchState


def leading(flags: torch.Tensor) -> torch.Tensor:
    """(B,) long, the number of leading True in each row of (B, m) `flags`."""
    return flags.long().cumprod(dim=1).sum(dim=1)


class BatchJacobi(BatchForm, reference=JacobiProposer, fixed_shape=True):
    """Jacobi decoding as a batched draft source.

    Args:
        block_size: m, guessed tokens per row and step.

    Attributes:
        guess: (B, m) long, each row's guess.
    """

    name, topk, window = "jacobi", 0, None

    def __init__(self, block_size: int = 8) -> None:
        check_int("block_size", block_size, 1)
        self.width = self.depth = block_size
        self.guess: torch.Tensor | None = None
        self.parents = torch.arange(-1, block_size - 1)  # one chain

    @classmethod
    def from_proposer(cls, proposer: JacobiProposer, max_depth: int, vocab_size: int) -> BatchJacobi:
        """The batch form of `proposer`: its block size m."""
        return cls(proposer.block_size)

    def begin(self, state: BatchState) -> None:
        """Each row's first guess: its prompt's last m tokens (cycled when the prompt is shorter)."""
        m = self.width
        tail = torch.clamp(state.length, max=m)[:, None]  # (B, 1) the tokens the cycle takes
        at = state.length[:, None] - tail + torch.arange(m, device=tail.device) % tail
        self.guess = state.text.gather(1, at)
        self.parents = self.parents.to(at.device)

    def propose(self, state: BatchState) -> Drafts:
        return Drafts.of(self.guess, self.parents, torch.ones_like(self.guess, dtype=torch.bool))

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """Shift the predictions after the converged guesses into the next guess."""
        m = self.width
        node_preds = outcome.node_preds(part)  # (B, m), -1 where the guess was not fed
        fed = leading(node_preds >= 0)  # the guess's fed prefix
        preds = torch.cat([outcome.preds[:, :1], node_preds], dim=1)  # (B, m + 1): o_0 .. o_m
        verdict = outcome.verdict
        width = min(m, verdict.tokens.shape[1])
        same = (self.guess[:, :width] == verdict.tokens[:, :width]) & (torch.arange(width, device=fed.device) < verdict.count[:, None])
        converged = torch.minimum(leading(same), fed)
        at = torch.minimum(converged[:, None] + 1 + torch.arange(m, device=fed.device), fed[:, None])
        self.guess.copy_(preds.gather(1, at))  # in place, as every step's state (`ladref.batched.resident`)

    def select(self, keep: torch.Tensor) -> None:
        self.guess = self.guess.index_select(0, keep)
