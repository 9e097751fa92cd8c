"""Greedy verification of pool candidates.

Accept rule, for candidate tokens c_1..c_{N-1} following the current token:
  # the model's argmax after the current token is y_1; after c_1..c_j it is y_{j+1};
  # keep c_j while c_j == y_j for every j so far (the candidate reproduces greedy decoding);
  # the accepted tokens are the matched c's plus the next y: 1..N tokens, exactly greedy's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Verdict:
    """Outcome of verification.

    Attributes:
        tokens: (k+1,) the accepted tokens: k matched candidate tokens then the model's own.
        best: index of the candidate that supplied the k tokens, or None when k == 0.
        matched: k, candidate tokens accepted (0 <= k <= N-1).
    """

    tokens: torch.Tensor
    best: int | None
    matched: int


def verify_greedy(candidates: torch.Tensor, first_pred: torch.Tensor, cand_preds: torch.Tensor) -> Verdict:
    """Find the candidate with the longest prefix that greedy decoding would produce.

    Args:
        candidates: (g, N-1) candidate tokens (their first token, the current one, left out).
        first_pred: () the model's argmax after the current token (y_1).
        cand_preds: (g, N-1) the model's argmax after each candidate token.

    Returns:
        The `Verdict`; with g == 0 it accepts exactly y_1, one greedy step.
    """
    g = candidates.shape[0]
    if g == 0:
        return Verdict(first_pred.reshape(1), None, 0)
    targets = torch.cat([first_pred.expand(g, 1), cand_preds], dim=1)  # (g, N): y_1 .. y_N per candidate
    match = (candidates == targets[:, :-1]).long().cumprod(dim=1)  # (g, N-1), 1 while the prefix matches
    lengths = match.sum(dim=1)  # (g,)
    best = int(lengths.argmax())
    k = int(lengths[best])
    return Verdict(targets[best, : k + 1], best if k else None, k)
