"""The production engines' rules for drafting under load, as `ladref.step.StepChoice` hooks.

Serving engines decide per batch whether n-gram speculation (prompt lookup) is worth it:

* a fixed batch-size threshold (`threshold_decode`): draft k tokens per row while the batch has
  at most `threshold` running rows, none above (vLLM's ``disable_by_batch_size``);
* a chain-length controller (`chain_decode`): a table of step times per (batch size, draft
  length) profiled at start-up and the batch's running acceptance rate alpha give each draft
  length k its expected goodput, (1 - alpha^(k+1)) / (1 - alpha) tokens per row per
  t(1 + k, B), and every row drafts the best k (0: none) each step (vLLM's dynamic speculative
  decoding). The table here is a measured `ladref.pricing.surface.CostSurface`.

Both draft with prompt lookup, as the engines' n-gram proposers do, and run on ladref's drafting
loop (`ladref.decoders.draft.decode_with_proposers`): one prompt through a `ladref.step.StepChoice`
(`Threshold`, `Chain`), a batch through a `ladref.batched.source.BatchChoice` (`BatchThreshold`,
`BatchChain`: the same rules as tensor operations over the rows). Their output is greedy's, row by row.
ladref's own answer is `ladref.adaptive_decode`, which prices trees and windows per row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import Unpack

from ..batched.drafts import Merged
from ..batched.source import Outcome
from ..batched.state import BatchState
from ..decoders.draft import decode_with_proposers
from ..pricing.surface import CostSurface
from ..options import DecodeOptions, accept
from ..proposer import merge_all
from ..results import BatchResult, DecodeResult
from ..runner import Runner
from ..sources.prompt_lookup import PromptLookupProposer
from ..tree import DraftTree
from ..types import Budget, Prompts


class Threshold:
    """Each step: the proposed chain (at most k tokens) while the batch has <= `threshold` rows, else nothing."""

    def __init__(self, runner: Runner, threshold: int) -> None:
        self.runner, self.threshold = runner, threshold

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        return (merge_all(trees) if self.may_draft(kv, window_cells) else DraftTree.empty()), False

    def may_draft(self, kv: int, window_cells: int | None) -> bool:
        return self.runner.rows <= self.threshold

    def observe(self, tokens: Sequence[int]) -> None:
        pass

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        pass


class ChainController:
    """The batch's draft length: alpha learned from every row's steps, k priced on the profiled table.

    alpha is the per-token acceptance of a chain, estimated as accepted / (accepted + rejections)
    over recent drafted steps (a chain of k accepting a < k tokens had a rejection), decayed by
    `decay` per step. Shared by a batch's rows (each row's `Chain` reports to it).
    """

    def __init__(self, surface: CostSurface, max_len: int, alpha: float = 0.5, decay: float = 0.98) -> None:
        self.surface, self.max_len, self.decay = surface, min(max_len, surface.widths[-1] - 1), decay
        self.accepted, self.trials = alpha, 1.0  # a prior worth one step

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.trials, 0.999)

    def length(self, rows: int, kv: int) -> int:
        """argmax_k of (1 - alpha^(k+1)) / (1 - alpha) / t(1 + k, kv, B): expected tokens per second."""
        curve, a = self.surface.at(rows), self.alpha
        return max(range(self.max_len + 1), key=lambda k: (1 - a ** (k + 1)) / (1 - a) / curve.time(1 + k, kv))

    def learn(self, drafted: int, accepted: int) -> None:
        self.accepted = self.decay * self.accepted + accepted
        self.trials = self.decay * self.trials + accepted + (accepted < drafted)


class Chain:
    """A row's hook: the controller's k for the batch it runs in, the proposed chain cut to k."""

    def __init__(self, runner: Runner, controller: ChainController) -> None:
        self.runner, self.controller, self.fed = runner, controller, 0

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        tree = merge_all(trees).prune(self.controller.length(self.runner.rows, kv))
        self.fed = len(tree)
        return tree, False

    def may_draft(self, kv: int, window_cells: int | None) -> bool:
        return self.controller.length(self.runner.rows, kv) > 0

    def observe(self, tokens: Sequence[int]) -> None:
        if self.fed:  # the step's tokens: its accepted draft, plus one
            self.controller.learn(self.fed, len(tokens) - 1)

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        pass


class BatchThreshold:
    """`Threshold` for a batch: every proposed node while at most `threshold` rows are still decoding, else none."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def choose(self, merged: Merged, state: BatchState, window_cells: int | None, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        few = (~state.done).sum() <= self.threshold
        return merged.kept & few, torch.zeros_like(state.done)

    def observe(self, state: BatchState, outcome: Outcome) -> None:
        pass

    def select(self, keep: torch.Tensor) -> None:
        pass


class BatchChain:
    """`Chain` for a batch: the controller's k for the rows still decoding, every row's chain cut to k.

    alpha is learned as `ChainController` learns it, from all the rows of a step at once (one
    decay a step rather than one a row), on the device; k is priced there too."""

    def __init__(self, controller: ChainController) -> None:
        self.controller, self.curve, self.alpha = controller, None, None
        self.k = torch.arange(controller.max_len + 1, dtype=torch.float64)

    def choose(self, merged: Merged, state: BatchState, window_cells: int | None, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        device, c = merged.kept.device, self.controller
        if self.alpha is None:  # accepted, trials
            self.alpha, self.k = torch.tensor([c.accepted, c.trials], dtype=torch.float64, device=device), self.k.to(device)
        curve = c.surface.at(state.size)
        times = torch.tensor([curve.time(1 + k, kv) for k in range(c.max_len + 1)], dtype=torch.float64, device=device)
        a = (self.alpha[0] / self.alpha[1]).clamp(max=0.999)
        k = ((1 - a ** (self.k + 1)) / (1 - a) / times).argmax()
        return merged.kept & (merged.kept.cumsum(-1) <= k), torch.zeros_like(state.done)

    def observe(self, state: BatchState, outcome: Outcome) -> None:
        drafted, accepted = outcome.fed.valid.sum(-1), outcome.verdict.depth
        tried = drafted > 0
        d = self.controller.decay
        self.alpha = d * self.alpha + torch.stack([(accepted * tried).sum(), ((accepted + (accepted < drafted)) * tried).sum()])

    def select(self, keep: torch.Tensor) -> None:
        pass


def threshold_decode(model: torch.nn.Module, input_ids: Prompts, max_new_tokens: Budget = 64, *, draft_len: int = 4,
                     threshold: int = 4, **options: Unpack[DecodeOptions]) -> DecodeResult | BatchResult:
    """Prompt lookup of up to `draft_len` tokens while the batch has at most `threshold` rows (method "threshold")."""
    return decode_with_proposers(model, input_ids, max_new_tokens, PromptLookupProposer(draft_len), "threshold", draft_len,
                                 accept("threshold_decode", options, DecodeOptions), choice=lambda runner: Threshold(runner, threshold),
                                 batch_choice=lambda rows: BatchThreshold(threshold))


def chain_decode(model: torch.nn.Module, input_ids: Prompts, max_new_tokens: Budget = 64, *, surface: CostSurface,
                 max_len: int = 8, **options: Unpack[DecodeOptions]) -> DecodeResult | BatchResult:
    """Prompt lookup with the draft length a `ChainController` prices on `surface` (method "chain")."""
    controller = ChainController(surface, max_len)  # one per call: the batch's rows share it
    return decode_with_proposers(model, input_ids, max_new_tokens, PromptLookupProposer(max_len), "chain", max_len,
                                 accept("chain_decode", options, DecodeOptions), choice=lambda runner: Chain(runner, controller),
                                 batch_choice=lambda rows: BatchChain(controller))
