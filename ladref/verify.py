"""Verification of pool candidates: greedy (`verify_greedy`) and chooser-driven (`verify_chosen`).

Accept rule, for candidate tokens c_1..c_{N-1} following the current token:
  # the model's argmax after the current token is y_1; after c_1..c_j it is y_{j+1};
  # keep c_j while c_j == y_j for every j so far (the candidate reproduces greedy decoding);
  # the accepted tokens are the matched c's plus the next y: 1..N tokens, exactly greedy's output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def verify_chosen(
    candidates: torch.Tensor,
    first_logits: torch.Tensor,
    cand_logits: torch.Tensor,
    choose: Callable[[Sequence[int], torch.Tensor, Sequence[int]], int],
    context: Sequence[int],
) -> Verdict:
    """Walk the candidates' prefix tree, letting `choose` pick each token (sampling or processors).

    Accept rule, at depth j with the candidates that agree with every token chosen so far:
      # their j-th tokens are the drafts; choose(context + chosen, logits here, drafts) picks token y_j;
      # if y_j is a draft, keep the candidates proposing it and read the next logits from one of them
      #   (they share a context, so any one will do); otherwise, or after N-1 drafts, stop after y_j.

    Args:
        candidates: (g, N-1) candidate tokens (their first token, the current one, left out).
        first_logits: (V,) the model's logits after the current token.
        cand_logits: (g, N-1, V) the model's logits after each candidate token.
        choose: picks one token from (context, logits, draft tokens), e.g. `SamplingChooser.choose`.
        context: the committed sequence, ending with the current token.

    Returns:
        The `Verdict`: 1..N tokens, the candidate that supplied the matched ones.
    """
    g, n = candidates.shape
    alive = torch.ones(g, dtype=torch.bool)
    logits, chosen, best = first_logits, [], None
    for j in range(n + 1):
        drafts = candidates[alive, j].tolist() if j < n else []
        token = int(choose([*context, *chosen], logits, drafts))
        chosen.append(token)
        if token not in drafts:
            break
        alive &= candidates[:, j] == token
        best = int(alive.nonzero()[0])
        logits = cand_logits[best, j]
    return Verdict(torch.tensor(chosen), best, len(chosen) - 1)
