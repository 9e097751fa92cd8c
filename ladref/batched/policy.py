"""Adaptive decoding on a batch: every row's drafts and window chosen by tensor operations over the rows.

The one-prompt policy (the tests' oracle, ``tests/oracle_policy.py``) for B rows at once, and the
only policy the library runs: `adaptive_decode` at every B, one prompt a batch of one. Each row values its proposed nodes by its
learned acceptance (`ladref.batched.acceptance`), made consistent between siblings (`exclusive`),
and feeds the b most valuable (a tree: a child is never worth more than its parent) and the window
or not, to maximise the pass's expected tokens per second on the measured surface at this batch:

    (the other rows' tokens + 1 + trust x the b nodes' value + window value) / t(max(q, floor)),

q = 1 + window cells + b, `floor` the widest step the other rows feed for their own sake (a pass
is as wide as its widest row: up to it, this row's tokens cost nothing). Every b and both window
choices are priced at once, (B, 2, n + 1) rates, and each row takes its best.

The prices are the host's (`ladref.batched.prices`): calibrated by the time of the passes when
asked (`timed`), and asked before any proposing whether a draft could pay at all (`may_draft`,
from the `hope` the loop reads with its one read): where none can, the loop's steps are bare ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..pricing.policy import PolicySettings
from ..pricing.surface import CostSurface
from .acceptance import Acceptance
from .drafts import Merged
from .prices import BatchPrices, Pass
from .runs import lexsort
from .source import Outcome
from .state import BatchState

HOPE = 2**20  # the fixed point of `BatchPolicy.hope`: read with the loop's longs


def exclusive(merged: Merged, value: torch.Tensor) -> torch.Tensor:
    """The oracle's ``exclusive`` on every row's merged trie: a node's children's values sum
    to at most its own, siblings (and with them their subtrees) scaled down to it. (B, n) in and out."""
    rows, n, _ = merged.table.shape
    up = merged.up  # (B, n, D) merged ancestors, n past the root
    parent = up[..., 1] if up.shape[-1] > 1 else torch.full_like(merged.canonical, n)
    ext = torch.cat([value, torch.ones_like(value[:, :1])], dim=1)
    below = torch.where(merged.kept, value / ext.gather(1, parent).clamp(min=1e-300), 0.0)  # P(right | parent right)
    total = torch.zeros_like(ext).scatter_add_(1, parent, below)
    below = torch.cat([below / total.gather(1, parent).clamp(min=1.0), torch.ones_like(value[:, :1])], dim=1)
    return torch.where(merged.kept, below.gather(1, up.flatten(1)).view(up.shape).prod(-1), 0.0)


def best(rates: torch.Tensor) -> torch.Tensor:
    """(B,) the index of each row's best rate in (B, m), ties to the last (the wider step)."""
    return rates.shape[1] - 1 - rates.flip(1).argmax(-1)


class BatchPolicy:
    """The `ladref.batched.source.BatchChoice` of adaptive decoding on a batch.

    Args:
        surface: t(q, kv, B) of this machine (`ladref.pricing.surface.CostSurface`).
        rows: B; names: the sources' names, in their slot order; depth: the deepest node.
        settings: priors, the window's source and calibration (`PolicySettings`: ``calibrate`` corrects
            the surface by the time of the passes, `timed`; off for a surface taken as it is).
        device: the model's.
        span: the widths priced, q = 1..span, whatever the surface measured (those it did not
            measure are never chosen); None: the surface's own. A captured program's tensors keep
            their shapes when its decoder is given another surface.
    """

    def __init__(self, surface: CostSurface, rows: int, names: Sequence[str], depth: int,
                 settings: PolicySettings = PolicySettings(), device: torch.device = torch.device("cpu"),
                 span: int | None = None) -> None:
        self.surface, self.settings, self.device, self.span, self.names = surface, settings, device, span, tuple(names)
        self.prices = BatchPrices(surface, settings, device, span)
        source = list(names).index(settings.window_source) if settings.window_source in names else -1
        self.acceptance = Acceptance(rows, len(names), depth, settings, source, device)
        self.tokens = torch.ones(rows, dtype=torch.float64, device=device)  # tokens per step each row yields (running)
        self.own = torch.ones(rows, dtype=torch.long, device=device)  # the width each row feeds for its own sake
        self.limit: tuple[int, bool] | None = None  # (nodes, window): the most a captured program feeds (None: no limit)
        self.wanted = torch.zeros(2, dtype=torch.long, device=device)  # (2,) the widest choice without the limit, as Plan.shape
        self.resting, self.wait = 0, 1  # `may_draft`'s noes since it last proposed, and how many it waits for

    def rates(self, row: int = 0) -> dict[tuple[str, int, int, int], float]:
        """What row `row` learned (one prompt: row 0): {(source, evidence, depth, sibling rank):
        accepted / reached, the prior's pseudo-counts included} for every key some node was checked at."""
        a, b = self.settings.prior
        accepted, reached = self.acceptance.accepted[row].tolist(), self.acceptance.reached[row].tolist()
        _, evidence, depth, ranks = self.acceptance.dims
        return {(self.names[k // (evidence * depth * ranks)], k // (depth * ranks) % evidence, k // ranks % depth, k % ranks): x / n
                for k, (x, n) in enumerate(zip(accepted, reached)) if n > b}

    def times(self, rows: int, kv: int) -> torch.Tensor:
        """(M,) float64 t(q, kv) of a pass of `rows` rows for q = 1..M (M: the widest measured, or
        `span`, infinite where not measured), corrected by the passes timed (`BatchPrices.curve`)."""
        return self.prices.times(rows, kv)

    @property
    def hoped(self) -> int:
        """The length of `hope`: 2 + D."""
        return 2 + self.acceptance.depth

    def hope(self, state: BatchState) -> torch.Tensor:
        """(2 + D,) long, what `may_draft` needs from the device, for the loop's read: the most any row
        still decoding trusts its drafts, the most it values the window (at least the bonus), and
        the best rate it has at each depth 1..D (any source, evidence and rank), each x `HOPE`, rounded up."""
        a = self.acceptance
        rates = (a.accepted / a.reached).view(-1, *a.dims).amax((1, 2, 4))[:, 1:]  # (B, D)
        values = torch.cat([a.trust[:, None], a.window_value.clamp(min=self.settings.window_bonus)[:, None], rates], dim=1)
        return (torch.where(state.done[:, None], 0.0, values).amax(0) * HOPE).ceil().long()

    @staticmethod
    def heard(hope: Sequence[int]) -> tuple[float, float, tuple[float, ...] | None]:
        """`hope` as read, in its units: (trust, window value, the best rate at each depth; None: none)."""
        return hope[0] / HOPE, hope[1] / HOPE, tuple(h / HOPE for h in hope[2:]) or None

    def may_draft(self, rows: int, kv: int, window_cells: int | None, hope: Sequence[int]) -> bool:
        """Whether any row of `rows` could gain from drafting at `kv` (`hope` as read): `choose` at its
        most hopeful, every node worth the most the best rates learned allow (`ladref.batched.prices.worth`;
        a whole token each where `hope` has no rates) times the best trust, the other rows yielding a
        token each, no pass padded. False: no draft can pay, the step is a plain one, nothing proposed.
        Where only the learned rates say no, a step still proposes after 1, 2, 4, ... such answers, at
        most `PolicySettings.explore` (1 again once they say yes): the rates learn only from proposals."""
        trust, bonus, levels = self.heard(hope)
        if self.prices.may_draft(rows, kv, window_cells, trust, bonus, levels):
            self.resting, self.wait = 0, 1
            return True
        self.resting += 1
        if levels is None or self.resting < self.wait:
            return False
        self.resting, self.wait = 0, min(2 * self.wait, self.settings.explore)
        return self.prices.may_draft(rows, kv, window_cells, trust, bonus)

    def timed(self, passes: Sequence[Pass], seconds: float) -> None:
        """The passes since the last read ((q, rows, kv) each) took `seconds`: calibrate (`BatchPrices.timed`)."""
        self.prices.timed(passes, seconds)

    def load(self, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) the other live rows' expected tokens, and (B,) the widest step they feed for their own sake (1: none)."""
        tokens = torch.where(live, self.tokens, 0.0)
        if live.shape[0] == 1:
            return tokens * 0, torch.ones_like(self.own)
        own = torch.where(live, self.own, 1)
        (first, second), widest = own.topk(2).values, own.argmax()
        floor = torch.where(torch.arange(own.shape[0], device=own.device) == widest, second, first)
        return tokens.sum() - tokens, floor

    def choose(self, merged: Merged, state: BatchState, window_cells: int | None, kv: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's nodes to feed and whether it feeds the window (`BatchChoice.choose`)."""
        rows, n = merged.kept.shape
        key, first = self.acceptance.keys(merged)
        own = torch.where(merged.drafts.valid, self.acceptance.values(merged, key, first), 0.0)
        value = exclusive(merged, torch.zeros_like(own).scatter_reduce_(1, merged.canonical, own, "amax"))
        value = torch.where(merged.kept, value, -1.0)
        order = lexsort([-value, merged.depth])  # ties: the shallower, then the earlier node first
        expected = torch.cat([torch.zeros_like(value[:, :1]), value.gather(1, order).clamp(min=0).cumsum(1)], dim=1)  # (B, n + 1)
        live = ~state.done
        others, floor = self.load(live)
        floors = torch.stack([floor, torch.ones_like(floor)], dim=1)  # the pass's width anyway, and 1: this row's own choice
        (b, window), probe = self.search(expected, merged.kept.sum(-1), window_cells, others, floors, rows, kv)
        self.own.copy_(1 + b[:, 1] + window[:, 1] * (window_cells or 0))  # in place, as all a step carries (`resident`)
        if self.limit is not None:  # a captured program's: its widest row's choice without the limit (the last column)
            self.wanted.copy_(torch.stack([(b[:, -1] * live).max(), (window[:, -1].bool() & live).any().long()]))
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(n, device=order.device).expand(rows, n))
        self.acceptance.remember(merged, key, first, rank < probe[:, None], expected.gather(1, probe[:, None])[:, 0],
                                 state.length - 1, state.length)
        return rank < b[:, :1], window[:, 0].bool()

    def search(self, expected: torch.Tensor, count: torch.Tensor, window_cells: int | None, others: torch.Tensor,
               floors: torch.Tensor, rows: int, kv: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Every row's best (b, window) for each floor, and the b of its best draft-only step under the
        first floor (b >= 1; 0: none).

        Args:
            expected: (B, n + 1) the summed value of the b most valuable nodes; count: (B,) the nodes proposed.
            others: (B,) the other rows' expected tokens; floors: (B, F) widths the pass has anyway.

        Returns:
            ((B, F) b, (B, F) window), (B,) the probe's b. With a `limit`, F + 1 columns: the last is
            the first floor's best without it (what a captured program of another width would feed).
        """
        times = self.times(rows, kv)
        widest, b = times.shape[0], torch.arange(expected.shape[1], device=expected.device)
        cells = torch.tensor([0] if window_cells is None else [0, window_cells], device=b.device)
        q = 1 + cells[:, None] + b  # (O, n + 1): O window options, no window first
        bonus = torch.clamp(self.acceptance.window_value, min=self.settings.window_bonus)[:, None] * (cells > 0)  # (B, O)
        gain = (others[:, None] + 1.0 + self.acceptance.trust[:, None] * expected)[:, None, None, :]  # (B, 1, 1, n + 1)
        width = torch.maximum(q, floors[:, :, None, None]).clamp(max=widest)  # (B, F, O, n + 1)
        cost = times[width - 1]
        allowed = (b <= count[:, None, None, None]) & (q <= widest) & cost.isfinite()  # proposed, and measured
        rate = torch.where(allowed, (gain + bonus[:, None, :, None]) / cost, -1.0)
        if self.limit is not None:  # a captured program's width: the choices within it, then the first floor's without it
            nodes, window = self.limit
            fits = (b <= nodes) & ((cells == 0) | window)[:, None]  # (O, n + 1) what this program feeds
            rate = torch.cat([torch.where(fits, rate, -1.0), rate[:, :1]], dim=1)
        rates = rate.flatten(2)  # ties to the wider
        choice = best(rates.flatten(0, 1)).view(rates.shape[:2])
        draft_only = torch.where(b >= 1, rates[:, 0, : b.shape[0]], -1.0)
        probe = torch.where(draft_only.max(-1).values > 0, draft_only.argmax(-1), 0)
        return (choice % b.shape[0], choice // b.shape[0]), probe

    def observe(self, state: BatchState, outcome: Outcome) -> None:
        """Learn from a step: each row's tokens per step, and every pending node now known (a plain
        step, nothing proposed: no row feeds anything for its own sake)."""
        self.tokens.copy_(0.8 * self.tokens + 0.2 * outcome.verdict.count)
        if outcome.merged.drafts.width == 0:
            self.own.fill_(1)
        self.acceptance.observe(state.text, state.length, outcome.verdict.count)

    def select(self, keep: torch.Tensor) -> None:
        self.tokens, self.own = self.tokens.index_select(0, keep), self.own.index_select(0, keep)
        self.acceptance.select(keep)
