"""A batch of one row over a one-prompt runner: the engine's cache for steps compiled once per width.

`ladref.batched.loop.decode_batch` drives a `ladref.batched.cache.BatchCache`: a dynamic cache
whose passes take any shape. `RunnerCache` gives the same loop the same operations over a
one-prompt `ladref.runner.Runner`, so that the engine's step, policy, sampler and streamer run
unchanged over `ladref.fast.static.StaticRunner`: a static cache whose passes are padded to a few
widths, each compiled once or loaded from a package (what `ladref.fast.compiled.CompiledDecoder`
and `CompiledAdaptiveDecoder` decode through). Its commit takes the count the step kept on the
host: one small read more a pass (on a CPU, a read of memory it already holds).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..results import DecodeStats
from ..runner import Runner


class RunnerCache:
    """`BatchCache`'s operations for one row, over `runner`'s cache.

    Args:
        runner: a one-prompt runner (`StaticRunner`: every pass padded to its next width).

    Attributes:
        frontier: T, the entries committed (the next pass writes after them), known to the host.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner, self.facts, self.frontier = runner, runner.facts, 0

    def prefill(self, prompts: Sequence[torch.Tensor], attention_backend: str) -> None:
        """Cache the one prompt but its last token (the first step's input), deferred: those tokens run
        in the first step's pass, before its own (`ladref.runner.Runner.prefill`), one pass fewer a
        call; the runner's kernels are its own."""
        if len(prompts) != 1:
            raise ValueError(f"a runner's cache holds one prompt, got a batch of {len(prompts)}")
        self.runner.prefill(prompts[0], DecodeStats(), defer=True)
        self.frontier = prompts[0].shape[0] - 1

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, allowed: torch.Tensor | None,
                keep: torch.Tensor) -> torch.Tensor:
        """One pass of the row's step (`BatchCache.forward`): (1, Q) ids and positions, (1, Q, Q) or
        None (one token) -> (1, k, V) logits of the step positions `keep`."""
        return self.runner.forward(input_ids[0], position_ids[0], None if allowed is None else allowed[0], keep)[None]

    def commit(self, entries: torch.Tensor, counts: torch.Tensor) -> None:
        """Keep the row's first ``counts[0]`` step entries of (1, K) `entries`, in path order."""
        kept = max(int(counts[0]), 1)  # the host's count (a row that stopped keeps its current token's entry)
        self.runner.commit(self.frontier, entries[0, :kept])

    @property
    def attended(self) -> int:
        """The entries a pass attends to: the frontier (what a step is priced at)."""
        return self.frontier

    def commit_one(self) -> None:
        """Keep the entry a one-token pass appended: the frontier moves past it."""
        self.frontier += 1

    def advance(self, by: int) -> None:
        """Move the frontier past the row's committed entries (the commit has set the runner's length)."""
        self.frontier += by

    def select(self, keep: torch.Tensor) -> None:
        """One row: it leaves only when the call ends, and nothing is kept for it."""
