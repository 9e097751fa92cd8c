"""A cost-aware step choice: how many drafts, and whether the lookahead window, each step feeds.

Before every forward pass the loop (`ladref.step.run_drafting`) asks its `ladref.step.StepChoice`
what to feed: which of the proposed draft nodes, and whether the lookahead window. Feeding more
makes the pass dearer, cost(q, kv) seconds for q tokens at KV length kv, and may accept more
tokens; the output is greedy's whatever is fed. `CostAwareChoice` feeds, at each step, the first
b nodes of the merged trie (`ladref.tree.DraftTree.prune`), with or without the window, whichever
gives the most expected tokens per modelled second:

* acceptance is learned from every step (`CostAwareChoice.observe`). The accepted tokens are
  greedy's next tokens, so every proposed node, fed or not, is checked against them: for each
  draft source and depth, the share of its checked nodes that spelled greedy's tokens (`prior`
  before any is checked). The first b nodes are expected to accept 1 + the sum of their shares;
* the window brings no token to the step that feeds it: its harvest feeds the pool, whose drafts
  (the `window_sources`') win tokens in later steps. A step with the window is credited with what
  those drafts won per step while the window was fed (a running mean, `WINDOW_PRIOR` tokens at
  first), and pays for the window's cells; the window is fed when that beats the best step
  without it.

It is one reasonable policy, not the best one: any choice that feeds a part of the proposed trie
keeps greedy's output, and is judged by the modelled time of the decodes it drives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .proposer import merge_all
from .tree import DraftTree

WINDOW_PRIOR = 1.0  # the window sources' drafts are assumed to win a token per step until steps tell
RECENT = 0.05  # the weight of each step in the running mean of what they won


class CostAwareChoice:
    """A `ladref.step.StepChoice` that feeds what maximises expected tokens per modelled second.

    Args:
        cost: the modelled seconds of one pass feeding q tokens at KV length kv, ``cost(q, kv)``;
            it must return a positive finite number.
        prior: the acceptance share assumed for a (source, depth) no step has fed yet, in (0, 1).
        window_sources: the draft sources whose drafts come from the window's harvest.

    Raises:
        TypeError: `cost` is not callable, or `window_sources` is not a tuple of str.
        ValueError: `prior` is not in (0, 1).
    """

    def __init__(self, cost: Callable[[int, int], float], prior: float = 0.5,
                 window_sources: tuple[str, ...] = ("lookahead",)) -> None:
        """Check the arguments; nothing learned yet, nothing fed."""
        if not callable(cost):
            raise TypeError(f"cost must be a callable cost(q, kv) -> seconds, got {type(cost).__name__}")
        if isinstance(prior, bool) or not isinstance(prior, (int, float)) or not 0 < prior < 1:
            raise ValueError(f"prior must be a number in (0, 1), got {prior!r}")
        if not isinstance(window_sources, tuple) or not all(isinstance(s, str) for s in window_sources):
            raise TypeError(f"window_sources must be a tuple of source names, got {window_sources!r}")
        self.cost, self.prior, self.window_sources = cost, float(prior), window_sources
        self.seen: dict[tuple[str, int], list[int]] = {}  # (source, depth) -> [right, checked] nodes
        self.pooled = WINDOW_PRIOR  # what the window sources' drafts won per step that fed the window, a running mean
        self.proposed, self.window = DraftTree.empty(), False  # the last step's merged trie, and whether it fed the window

    def price(self, q: int, kv: int) -> float:
        """``cost(q, kv)``, checked.

        Raises:
            ValueError: the cost is not a positive finite number.
        """
        seconds = self.cost(q, kv)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"cost({q}, {kv}) must be a positive finite number of seconds, got {seconds!r}")
        return float(seconds)

    def best(self, shares: Sequence[float], kv: int, extra: int, base: float) -> tuple[float, int]:
        """The prefix of the trie with the most expected tokens per modelled second.

        Args:
            shares: each node's expected acceptance, in the trie's order (parents first).
            kv: the step's KV length.
            extra: tokens fed besides the current token and the nodes (the window's cells, or 0).
            base: the tokens a step is credited with before any node: 1, plus what the window's
                harvest wins per step when the window is fed.

        Returns:
            (tokens per second, b): the best rate and the number of first nodes that gives it.
        """
        # 1. No node: the current token (and the extra tokens) alone.
        rate, budget, gain = base / self.price(1 + extra, kv), 0, base
        # 2. Each longer prefix adds its last node's share, and one token to the pass.
        for b, share in enumerate(shares, 1):
            gain += share
            candidate = gain / self.price(1 + extra + b, kv)
            if candidate > rate:
                rate, budget = candidate, b
        return rate, budget

    def choose(self, trees: Sequence[DraftTree], evidence: Sequence[int], kv: int, window_cells: int | None) -> tuple[DraftTree, bool]:
        """The first nodes of the merged trie, and whether to feed the window (`ladref.step.StepChoice`).

        Args:
            trees: every proposer's tree for the current token.
            evidence: the proposers' grades of their trees (unused).
            kv: the KV length before the step.
            window_cells: the window's cells besides the current token, None without a window.

        Returns:
            (the tree to feed, whether to feed the window).

        Raises:
            ValueError: `cost` returned something other than a positive finite number.
        """
        tree = merge_all(trees)
        # 1. Each node's share: learned for its source and depth, or the prior.
        shares = []
        for source, depth in zip(tree.sources, tree.depths.tolist()):
            right, checked = self.seen.get((source, depth), (0, 0))
            shares.append((right + self.prior) / (checked + 1))
        # 2. The window: its cells in the pass, and what its harvest will win (the window sources'
        #    recent drafts per step); fed when that beats the best step without it.
        fed_window = self.best(shares, kv, window_cells, 1.0 + self.pooled) if window_cells is not None else (-1.0, 0)
        bare = self.best(shares, kv, 0, 1.0)
        window = fed_window[0] >= bare[0]
        # 3. The best prefix of the chosen kind of step.
        self.proposed, self.window = tree, window
        return tree.prune(fed_window[1] if window else bare[1]), window

    def observe(self, tokens: Sequence[int]) -> None:
        """Learn from the tokens the step accepted: which proposed nodes, fed or not, spelled them.

        Args:
            tokens: the accepted tokens, greedy's next ones; all but the last spell a path of the fed trie.
        """
        # 1. Greedy's next tokens are known: each proposed node, fed or not, spells them (right),
        #    departs from them (wrong), or goes deeper than they reach (unknown: not counted).
        tokens, right = list(tokens), []
        for node, (parent, depth) in enumerate(zip(self.proposed.parents.tolist(), self.proposed.depths.tolist())):
            if parent >= 0 and right[parent] is not True:
                right.append(right[parent])
            else:
                right.append(None if depth > len(tokens) else int(self.proposed.tokens[node]) == tokens[depth - 1])
        # 2. Count every known node for its source and depth.
        for source, depth, ok in zip(self.proposed.sources, self.proposed.depths.tolist(), right):
            if ok is not None:
                counts = self.seen.setdefault((source, depth), [0, 0])
                counts[0] += ok
                counts[1] += 1
        # 3. In a step that fed the window: what the window sources' drafts won, in the running mean.
        if self.window:
            won = sum(ok is True and source in self.window_sources for source, ok in zip(self.proposed.sources, right))
            self.pooled = (1 - RECENT) * self.pooled + RECENT * won
        self.proposed = DraftTree.empty()

    def timed(self, fed: int, kv: int, seconds: float) -> None:
        """A step's measured time: unused, the modelled `cost` is what this choice saves.

        Args:
            fed: the tokens the step fed.
            kv: its KV length.
            seconds: its wall time.
        """
        return None
