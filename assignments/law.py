"""The "law" judge: a chi-square goodness-of-fit test of a sampler's counts against its exact law.

A probe of a sampling rule (``hidden/task2_1.py``) draws n outcomes through the submission and
answers ``{"rows": [label, ...], "law": [[P(cell)] ...], "counts": [[count] ...]}``; the reference's
run records the exact law (computed by the probe, never by the code it grades). `law_judge`
passes the submission's counts when Pearson's chi-square test against the reference's law does
not reject them at the case's level ``case["alpha"]``:

* an outcome the law gives probability 0 (an accepted draft the rule never accepts, a token the
  target never emits) fails the case outright: a correct rule never produces it;
* cells whose expected count n P(cell) is below `MIN_EXPECTED` are pooled into one cell (with the
  smallest others, until the pool reaches `MIN_EXPECTED`), the usual condition of the chi-square
  approximation;
* the p-value is the upper tail of the chi-square law on (cells - 1) degrees of freedom,
  ``torch.special.gammaincc(df / 2, statistic / 2)``; the case passes when it is at least alpha.

A correct rule fails a case with probability about alpha. Pearson's approximation is optimistic
far in the tail (near alpha = 1e-5 a correct rule fails about twice as often as alpha says), so a
task sets its per-case alpha with a margin: the actual levels, summed over its cases, bound the
chance that a correct submission loses any (``hidden/task2_1.py``, measured in
``tests/test_sampling_task.py``).
"""

from __future__ import annotations

import torch

MIN_EXPECTED = 5.0  # cells expected fewer times than this are pooled
SHOWN_CELLS = 3  # the largest deviations a failed case shows


def pooled(counts: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(observed, expected) per cell after pooling: the cells expected fewer than `MIN_EXPECTED` times
    into one cell, joined by the smallest remaining cells while that pool is still short.

    Args:
        counts: (..., C) observed counts of the cells the law gives positive probability (a batch
            of count vectors pools alike: the pooling depends on `expected` only).
        expected: (C,) their expected counts.

    Returns:
        (observed (..., C'), expected (C',)), float64, the pool (if any) last.
    """
    order = torch.argsort(expected)
    counts, expected = counts[..., order].double(), expected[order].double()
    small = int((expected < MIN_EXPECTED).sum())
    if small:
        totals = torch.cumsum(expected, 0)
        while small < len(expected) and totals[small - 1] < MIN_EXPECTED:
            small += 1
        counts = torch.cat([counts[..., small:], counts[..., :small].sum(-1, keepdim=True)], -1)
        expected = torch.cat([expected[small:], expected[:small].sum()[None]])
    return counts, expected


def chi_square(counts: torch.Tensor, law: torch.Tensor) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value) of Pearson's test of `counts` against `law`, on the cells
    the law gives positive probability (the caller checks the others are empty).

    Args:
        counts: observed counts, any shape.
        law: the cells' probabilities, the same shape, summing to 1.

    Returns:
        (statistic, df, p-value); df 0 (one cell: nothing to test) gives p-value 1.
    """
    counts, law = counts.flatten().double(), law.flatten().double()
    possible = law > 0
    observed, expected = pooled(counts[possible], law[possible] * counts.sum())
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = len(expected) - 1
    if df < 1:
        return statistic, 0, 1.0
    half = torch.tensor([df / 2, statistic / 2], dtype=torch.float64)
    p_value = float(torch.special.gammaincc(half[0], half[1]))
    return statistic, df, p_value


def answer_problem(case: dict, expected: dict, got) -> str | None:
    """Why `got` is not counts shaped as the law, adding up to the case's draws, else None."""
    law = expected["law"]
    if not isinstance(got, dict) or not isinstance(got.get("counts"), list):
        return "the answer is not {'counts': [[...], ...], ...}"
    counts = got["counts"]
    if len(counts) != len(law) or any(not isinstance(row, list) or len(row) != len(law[0]) for row in counts):
        return f"the counts are not {len(law)} rows of {len(law[0])} cells"
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for row in counts for c in row):
        return "the counts are not non-negative ints"
    if sum(map(sum, counts)) != case["draws"]:
        return f"the counts add up to {sum(map(sum, counts))}, not the case's {case['draws']} draws"
    return None


def cell(rows: list[str], size: int, index: int) -> str:
    return f"({rows[index // size]}, token {index % size})"


def law_judge(case: dict, expected: dict, got) -> tuple[bool, str, None]:
    """Pass `got["counts"]` when the chi-square test against `expected["law"]` does not reject it at
    ``case["alpha"]`` (see the module docstring); the message gives the statistic, the p-value and,
    on failure, the cells furthest from their expected counts."""
    problem = answer_problem(case, expected, got)
    if problem is not None:
        return False, problem, None
    counts, law = torch.tensor(got["counts"], dtype=torch.float64), torch.tensor(expected["law"], dtype=torch.float64)
    rows, size, alpha, n = expected["rows"], law.shape[1], case["alpha"], case["draws"]
    impossible = torch.nonzero((law.flatten() <= 0) & (counts.flatten() > 0)).flatten().tolist()
    if impossible:
        seen = ", ".join(f"{cell(rows, size, i)} {int(counts.flatten()[i])} times" for i in impossible[:SHOWN_CELLS])
        return False, f"outcomes of probability 0 under the rule's law (a correct rule never gives them): {seen}", None
    statistic, df, p_value = chi_square(counts, law)
    verdict = (f"chi-square {statistic:.1f} on {df} degrees of freedom over {n} draws: p-value {p_value:.3g}, "
               f"{'at least' if p_value >= alpha else 'below'} the case's alpha {alpha:.3g}")
    if p_value >= alpha:
        return True, verdict, None
    deviations = ((counts - n * law) / (n * law).clamp(min=1e-12).sqrt()).flatten()
    worst = [i for i in torch.argsort(deviations.abs(), descending=True).tolist() if law.flatten()[i] > 0][:SHOWN_CELLS]
    shown = "; ".join(f"{cell(rows, size, i)}: expected {n * float(law.flatten()[i]):.1f}, got {int(counts.flatten()[i])}"
                      for i in worst)
    return False, (f"the outcomes are not distributed as the rule's exact law ({verdict}; only a rare unlucky draw "
                   f"fails a correct rule here). Furthest from the law: {shown}"), None

