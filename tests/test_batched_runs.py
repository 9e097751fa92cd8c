"""The sort-based run helpers (`ladref.batched.runs`) against the pairwise tests they replaced."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ladref.batched.runs import earlier_in_run, first_in_run, runs


def pairwise(key: torch.Tensor, split: torch.Tensor | None, flag: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, n, n) answers: each slot's smallest flagged slot of equal keys (n: none), and its flagged earlier ones."""
    n = key.shape[1]
    same = key[:, :, None] == key[:, None, :]
    if split is not None:
        same &= split[:, :, None] == split[:, None, :]
    same &= flag[:, None, :]
    first = torch.where(same, torch.arange(n), n).amin(-1) if n else key.clone()
    return first, (same & torch.ones(n, n, dtype=torch.bool).tril(-1)).sum(-1)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(0, 12), st.integers(1, 4), st.booleans(), st.integers(0, 2**31 - 1))
def test_runs_answer_as_the_pairwise_tests(rows, n, distinct, with_split, seed):
    """Few distinct keys (many repeats), a nondecreasing split (a source's slots after the one before's)."""
    generator = torch.Generator().manual_seed(seed)
    key = torch.randint(distinct, (rows, n), generator=generator) * (2**40 + 7) - 2**41  # large, negative too
    split = torch.randint(3, (n,), generator=generator).sort().values.expand(rows, n) if with_split else None
    flag = torch.rand(rows, n, generator=generator) < 0.7
    first, earlier = pairwise(key, split, flag)
    grouped = runs(key, split)
    assert torch.equal(first_in_run(*grouped, flag), first)
    assert torch.equal(earlier_in_run(*grouped, flag), earlier)
