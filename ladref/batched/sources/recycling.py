"""Token Recycling for every row of a batch at once: one adjacency matrix per row, grown and refreshed by gathers.

The batch form of `ladref.sources.recycling.RecyclingProposer`. Each row keeps its own matrix of
the top-k successors last predicted after every token, all rows in one (B, V + 2, k) int32 tensor:

* a successor the row has not seen yet is stored as V (not -1), and row V holds V everywhere:
  the children of an unknown token are then unknown by the gather itself, with no mask a level;
* row V + 1 is scratch: `learn` sends every position that must not write (padding, a window the
  row did not feed, an earlier occurrence of a token fed again) there, in the same scatter;
* int32 halves the memory of long ids; B (V + 2) k 4 bytes in all (B = 8, V = 152k, k = 8: 39 MB).

`propose` fills the static template (`ladref.sources.recycling.TreeTemplate`) depth by depth, one
gather per level for every row and node of that level (D levels: D gathers, whatever B is).
`learn` writes the top-k after every fed token into its row of the matrix; for a token fed more
than once in a step the last position wins, as in the reference, without a loop over rows (one
sort of each row's (B, Q) positions finds it, not a (B, Q, Q) test: O(B Q log Q)).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ...facts import ModelFacts
from ...sources.recycling import RecyclingProposer, TreeTemplate, check_template
from ..drafts import Drafts
from ..forms import BatchForm
from ..source import Outcome
from ..state import BatchState


Level = tuple[torch.Tensor | None, torch.Tensor]  # a depth's (parents among the level above, ranks)


def template_levels(template: TreeTemplate) -> tuple[list[Level], torch.Tensor, torch.Tensor | None]:
    """The template's nodes depth by depth, each level's parents as indices into the level above.

    Returns:
        levels: per depth d = 1..D, (parent, ranks): parent (m_d,) long, each node's parent among
            level d-1's nodes (None at depth 1: the current token), ranks (m_d,) long;
        parents: (n,) long, each node's parent slot in template order (-1: the current token);
        order: (n,) long, where each template slot sits among the levels' nodes, concatenated: the
            gather back to template order (None when the template lists its nodes level by level).
    """
    paths = template.paths
    index = {p: i for i, p in enumerate(paths)}
    parents = torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in paths], dtype=torch.long)
    levels, above, flat = [], {}, []
    for d in range(1, template.depth + 1):
        nodes = [i for i, p in enumerate(paths) if len(p) == d]
        parent = None if d == 1 else torch.tensor([above[paths[i][:-1]] for i in nodes], dtype=torch.long)
        levels.append((parent, torch.tensor([paths[i][-1] for i in nodes], dtype=torch.long)))
        above = {paths[i]: j for j, i in enumerate(nodes)}
        flat += nodes
    order = torch.argsort(torch.tensor(flat))  # template slot i sits at order[i] of the levels' concatenation
    return levels, parents, None if flat == sorted(flat) else order


class BatchRecycling(BatchForm, reference=RecyclingProposer, fixed_shape=True):
    """Token Recycling as a batched draft source: a template of rank paths over each row's own matrix.

    Args:
        vocab_size: V, the model's vocabulary (rows of each matrix).
        template: the static tree shape; default `TreeTemplate.best_first()` (80 nodes, depth 6).
        topk: k, successors kept per token; default the template's width.

    Attributes:
        adjacency: (B, V + 2, k) int32, each row's successors (V: unknown; rows V and V + 1 spare), set by `begin`.
        parents: (n,) long, the template's parent slots (static: the tree never changes shape).
        start: the `RecyclingProposer` whose matrix every row starts from (`from_proposer`), None: cold.
    """

    name, window = "recycling", None

    def __init__(self, vocab_size: int, template: TreeTemplate | None = None, topk: int | None = None) -> None:
        template, topk = check_template(vocab_size, template, topk)
        self.vocab_size, self.template, self.topk, self.depth = vocab_size, template, topk, template.depth
        self.levels, self.parents, self.order = template_levels(template)
        self.adjacency: torch.Tensor | None = None
        self.start: RecyclingProposer | None = None
        self.alone = False

    @classmethod
    def for_model(cls, model: torch.nn.Module, **options) -> "BatchRecycling":
        """A source sized for `model`'s vocabulary."""
        return cls(ModelFacts.of(model).vocab_size, **options)

    @classmethod
    def from_proposer(cls, proposer: RecyclingProposer, max_depth: int = 0, vocab_size: int = 0) -> BatchRecycling:
        """The batch form of a one-prompt proposer: its template and k; with ``proposer.warm``, every row
        starts from the proposer's matrix as it is at `begin`.

        A batch of one row writes its matrix back into the proposer when the call ends, as the
        one-prompt loop leaves it, so one prompt after another keeps it warm. A batch of several
        leaves it as it was: each row learns from its own text, and no row's matrix (nor any mix of
        them, whose rows stopped at different times) is the one the proposer would hold after
        decoding the prompts one by one. (`max_depth` and `vocab_size`,
        which every form takes, are the proposer's own here: its template's depth, its matrix's rows.)
        """
        if not isinstance(proposer, RecyclingProposer):
            raise TypeError(f"proposer must be a RecyclingProposer, got {type(proposer).__name__}")
        source = cls(proposer.adjacency.shape[0], proposer.template, proposer.topk)
        source.start = proposer if proposer.warm else None
        return source

    def begin(self, state: BatchState) -> None:
        """Every row's matrix: empty (every successor V), or the warm proposer's."""
        v, k, device = self.vocab_size, self.topk, state.text.device
        first = torch.full((v + 2, k), v, dtype=torch.int32)
        if self.start is not None:
            first[:v] = torch.where(self.start.adjacency < 0, v, self.start.adjacency)
        self.adjacency = first.to(device).expand(state.size, v + 2, k).clone()
        self.alone = state.size == 1  # a batch of one row: its matrix goes back to a warm proposer at the end
        self.parents = self.parents.to(device)
        self.levels = [(None if p is None else p.to(device), r.to(device)) for p, r in self.levels]
        self.order = None if self.order is None else self.order.to(device)

    def propose(self, state: BatchState) -> Drafts:
        """(B, n) the template grown from each row's current token (invalid: an unknown token, or under one; token 0)."""
        rows, k = state.size, self.topk
        flat = self.adjacency.view(rows, -1)  # (B, (V + 2) k): token t's rank r at t k + r
        found, levels = state.current[:, None], []
        for parent, ranks in self.levels:  # depth by depth: a node takes its rank among its parent's successors
            if parent is not None:
                found = found.index_select(1, parent)
            found = flat.gather(1, found * k + ranks)  # (B, m_d); V under an unknown parent (row V)
            levels.append(found)
        tokens = torch.cat(levels, dim=1)
        if self.order is not None:
            tokens = tokens.index_select(1, self.order)
        valid = tokens < self.vocab_size
        return Drafts.of(torch.where(valid, tokens, 0).long(), self.parents, valid, trie=True)

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """Each fed token's row becomes the top-k the model predicted after it (the last position wins).

        A position counts where the row fed it: the current token, the window when the row fed it
        (``outcome.window``), its own nodes (``outcome.fed.valid``); padding does not.
        """
        if outcome.top is None:
            return
        ids, top, length = outcome.ids, outcome.top, outcome.length
        rows, q = ids.shape
        if top.shape[-1] != self.topk:
            top = top[..., : self.topk]
        # 1. The positions each row fed: [current | window (if the row fed it) | its nodes].
        fed = [ids.new_ones((rows, 1), dtype=torch.bool), outcome.fed.valid]
        if outcome.window is not None:
            fed.insert(1, outcome.window[:, None].expand(rows, length - 1))
        fed = torch.cat(fed, dim=1)  # (B, Q)
        # 2. The last fed occurrence of each token: sorted stably by (token, fed), the last of its token's run.
        key, order = (ids * 2 + fed).sort(dim=1, stable=True)  # (B, Q): a token's fed positions last, in order
        last = F.pad(key.diff(dim=1) != 0, (0, 1), value=True) & fed.gather(1, order)
        target = torch.where(torch.empty_like(fed).scatter_(1, order, last), ids, self.vocab_size + 1)  # the rest: scratch
        # 3. One scatter for every row: adjacency[b, target[b, i], r] = top[b, i, r].
        self.adjacency.scatter_(1, target[:, :, None].expand(rows, q, self.topk), top.to(torch.int32))

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` ((B',) long, in order)."""
        self.adjacency = self.adjacency.index_select(0, keep)

    def finish(self, outputs: Sequence[Sequence[int]]) -> None:
        """The call's end (`ladref.batched.source.remember`): a batch of one row writes its matrix back
        into the warm proposer it started from (`from_proposer`)."""
        if self.start is not None and self.alone and self.adjacency.shape[0] == 1:
            self.start.adjacency.copy_(self.matrix(0).to(self.start.adjacency.device))

    def matrix(self, row: int) -> torch.Tensor:
        """(V, k) long, row `row`'s matrix as `RecyclingProposer.adjacency` holds it (-1: unknown); for inspection."""
        table = self.adjacency[row, : self.vocab_size].long()
        return torch.where(table == self.vocab_size, -1, table)
