"""Any `ladref.Proposer` in a batch: each row's own copy, called on the host once a step for all rows.

A proposer written for one prompt (`ladref.DraftSource`: ``propose(context) -> DraftTree``,
``learn(StepOutcome)``) has no tensor form; `RowProposers` runs it as a
`ladref.batched.source.BatchSource` anyway, with no threads:

1. begin: every row gets its own deep copy of the proposers (they hold state), except the objects
   meant to be shared: a `ladref.SuffixMemory` stays one memory for every row (`copy_for_rows`);
2. propose: each row's copies propose for its text (`ladref.proposer.propose_apart`, checked
   trees), merged into one trie (`merge_all`), cut to ``max_depth``, padded into (B, n) `Drafts`;
3. learn: each row's `StepOutcome`, built from ONE packed read of the step's outcome, is what the
   one-prompt loop (`ladref.step.run_drafting`) would have handed its proposers; it also gives
   the host each row's kept tokens, so that proposing needs no read of its own.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence

import torch

from ...config import check_int
from ...proposer import MAX_DRAFT_DEPTH, Proposer, StepOutcome, check_proposers, merge_all, propose_apart
from ...sources.suffix_trie import SuffixMemory
from ...tree import DraftTree
from ..drafts import Drafts
from ..source import Outcome
from ..state import BatchState


def check_row_proposers(proposers: object) -> list[Proposer]:
    """`ladref.proposer.check_proposers`, and what a batch cannot run: a class for an instance, a window.

    Raises:
        TypeError: a proposer class instead of an instance, or an object lacking the protocol.
        ValueError: no proposer, or one bringing a lookahead window of its own (a batch's window is
            the batched lookahead's, `ladref.batched.sources.lookahead.BatchLookahead`).
    """
    items = list(proposers) if isinstance(proposers, (list, tuple)) else [proposers]
    for p in items:
        if isinstance(p, type):
            raise TypeError(f"{p.__name__} is a class: pass an instance of it, {p.__name__}(...), as a proposer")
    items = check_proposers(items)
    for p in items:
        if p.window is not None:
            raise ValueError(f"{type(p).__name__} ({p.name!r}) brings a lookahead window of its own, which a batch cannot "
                             "feed: a batch's window is the batched lookahead's (BatchLookahead); use a proposer without one")
    return items


def copy_for_rows(proposers: Sequence[Proposer], rows: int) -> list[list[Proposer]]:
    """`rows` deep copies of `proposers`, one list per row; a `SuffixMemory` one of them holds (as an
    attribute) is not copied: every row's copy drafts from, and records into, that one memory."""
    shared = {id(v): v for p in proposers for v in getattr(p, "__dict__", {}).values() if isinstance(v, SuffixMemory)}
    return [copy.deepcopy(list(proposers), dict(shared)) for _ in range(rows)]


def is_trie(tree: DraftTree) -> bool:
    """Whether no two siblings of `tree` draft the same token."""
    pairs = list(zip(tree.parents.tolist(), tree.tokens.tolist()))
    return len(set(pairs)) == len(pairs)


def padded_drafts(trees: Sequence[DraftTree], evidence: Sequence[int], device: torch.device) -> Drafts:
    """Every row's tree in n slots (n: the widest tree, at least 1), the rest invalid (token 0, under the root).

    A step where no row drafts still has one (invalid) slot: the step's merge of several sources'
    drafts needs at least one.

    Returns:
        `Drafts` with (B, n) tokens, parents and valid, (B, 1) evidence; ``trie`` when every tree is one.
    """
    n = max([1] + [len(t) for t in trees])
    table = [t.tokens.tolist() + [0] * (n - len(t)) + t.parents.tolist() + [-1] * (n - len(t)) + [1] * len(t)
             + [0] * (n - len(t)) + [e] for t, e in zip(trees, evidence)]
    packed = torch.tensor(table, dtype=torch.long, device=device)  # (B, 3n + 1): one copy to the device
    tokens, parents, valid, grades = packed.split([n, n, n, 1], dim=1)
    return Drafts(tokens, parents, valid.bool(), torch.zeros(n, dtype=torch.long, device=device), grades,
                  all(is_trie(t) for t in trees))


def outcome_columns(state: BatchState, outcome: Outcome, top: bool) -> torch.Tensor:
    """(B, K) long, all a row's `StepOutcome` needs, to be read at once: [done, kept, accepted count,
    fed its window, root_pred | accepted tokens (T) | window cells (L-1) | the w fed nodes' tokens, valid,
    parent position (-1: the root), accepted, node_preds, merged slot, source | top-k (Q k), if `top`]."""
    fed, verdict, length = outcome.fed, outcome.verdict, outcome.length
    up = fed.ancestors & (fed.depth[:, None, :] == fed.depth[:, :, None] - 1)  # [b, i, j]: j is i's parent
    parent = torch.where(fed.depth == 1, -1, up.to(torch.int8).argmax(-1)) if fed.width else fed.depth
    window = torch.zeros_like(outcome.kept) if outcome.window is None else outcome.window.long()
    columns = [torch.stack([state.done.long(), outcome.kept, verdict.count, window, outcome.preds[:, 0]], dim=1),
               verdict.tokens, outcome.ids[:, 1:length], fed.tokens, fed.valid.long(), parent, verdict.path.long(),
               outcome.preds[:, length:], fed.node, outcome.merged.drafts.source[fed.node]]
    if top:
        columns.append(outcome.top.flatten(1))
    return torch.cat(columns, dim=1)


class RowProposers:
    """`ladref.Proposer` s as one batch source: each row's copies proposing and learning on the host.

    Several proposers draft as ONE source (their trees merged per row, first first), named by their
    names joined with "+", graded by the first one's ``evidence``; give each its own `RowProposers`
    (`row_sources`) to keep their statistics and grades apart, as the one-prompt decoder does.

    Cost, per step: ONE read from the device (`learn`'s packed outcome, (B, K) longs, K = 5 + T +
    (L - 1) + 7w, plus Q k with the top-k; `propose` reads nothing: `learn` gave the host each row's
    kept tokens), ONE copy to it (the padded drafts); a step where rows leave also reads `select`'s
    `keep`, and `begin` the prompts, once. The device ops of `propose` and `learn` do not depend on B. On the host, per row:
    each proposer's ``propose`` and ``learn``, the tree's check (`ladref.proposer.proposal`), merge
    and depth cut, and the `StepOutcome`'s small CPU tensors (input_ids, the tree, node_preds, top).

    Differences from the one-prompt loop, which give other statistics, never other tokens: a tree
    deeper than `max_depth` is cut to its nodes at most `max_depth` deep (the one-prompt loop only
    cuts at the model's context); a tree whose siblings repeat a token has them fed once; a
    proposer with ``topk`` 0 gets ``top`` None even when another source asked for it; ``harvest``
    is None (a batch's window is not a proposer's); a node another batch source proposed first is
    named ``"source i"`` in the tree (i: that source's index in the batch).

    Args:
        proposers: a `ladref.Proposer` or a sequence of them (checked: `check_row_proposers`).
        max_depth: the deepest draft node (``depth``: the step's reach, checked against the context).
        vocab_size: the model's vocabulary, which drafted tokens are checked against; None: only
            negative ids are refused here.
    """

    window = None

    def __init__(self, proposers: Proposer | Sequence[Proposer], max_depth: int = MAX_DRAFT_DEPTH,
                 vocab_size: int | None = None) -> None:
        self.proposers = check_row_proposers(proposers)
        check_int("max_depth", max_depth, 0)
        if vocab_size is not None:
            check_int("vocab_size", vocab_size, 1)
        self.name = "+".join(dict.fromkeys(p.name for p in self.proposers))
        self.depth, self.vocab_size = max_depth, vocab_size
        self.topk = max(p.topk for p in self.proposers)
        self.copies: list[list[Proposer]] = []  # each row's proposers
        self.contexts: list[list[int]] = []  # each row's text, its current token last
        self.trees: list[DraftTree] = []  # each row's latest proposal, node i in slot i
        self.done: list[bool] = []  # the rows that stopped at the latest step (they leave at the next read)

    def begin(self, state: BatchState) -> None:
        """Each row's copies begin on its prompt (one read of the prompts)."""
        read = torch.cat([state.length[:, None], state.text], dim=1).tolist()
        self.contexts = [row[1 : 1 + row[0]] for row in read]
        self.copies = copy_for_rows(self.proposers, len(read))
        for proposers, context in zip(self.copies, self.contexts):
            for proposer in proposers:
                proposer.begin(list(context))
        self.trees, self.done = [DraftTree.empty()] * len(read), [False] * len(read)

    def propose(self, state: BatchState) -> Drafts:
        """Each live row's merged, checked tree at most ``depth`` deep, padded to the widest (no read)."""
        vocab = sys.maxsize if self.vocab_size is None else self.vocab_size
        trees, evidence = [], []
        for proposers, context, done in zip(self.copies, self.contexts, self.done):
            if done:  # the row leaves before the pass: nothing proposed, as the one-prompt loop stops
                trees.append(DraftTree.empty())
                evidence.append(0)
                continue
            apart, grades = propose_apart(proposers, context, vocab)
            tree = merge_all(apart)
            trees.append(tree if len(tree) <= self.depth else tree.within_depth(self.depth))  # n nodes: at most n deep
            evidence.append(grades[0])
        self.trees = trees
        return padded_drafts(trees, evidence, state.text.device)

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """Every row's proposers learn the row's `StepOutcome` (one read); its kept tokens join its text."""
        want_top = bool(self.topk) and outcome.top is not None
        rows = outcome_columns(state, outcome, want_top).tolist()  # the one read
        widths = (outcome.verdict.tokens.shape[1], outcome.length - 1, outcome.fed.width, outcome.top.shape[2] if want_top else 0)
        for b, row in enumerate(rows):
            if self.done[b]:  # stopped at an earlier step of a run: it keeps nothing, and its proposers learn nothing
                continue
            step = self.row_outcome(b, row, widths, part).cut(row[1])  # stopped inside it: what it kept, as one prompt's loop
            for proposer in self.copies[b]:
                proposer.learn(step)
            self.contexts[b].extend(step.tokens[: row[1]])  # the kept ones (all accepted, unless the row stopped)
            self.done[b] = bool(row[0])

    def row_outcome(self, b: int, row: list[int], widths: tuple[int, int, int, int], part: slice) -> StepOutcome:
        """Row b's `StepOutcome`, as the one-prompt loop builds it, from its row of `outcome_columns`.

        Args:
            widths: (T accepted-token columns, L - 1 window cells, w fed-node columns, k top-k columns).
            part: this source's slots (its nodes are named as its proposers named them).
        """
        accepted, cells, w, k = widths
        _, _, count, window, root = row[:5]
        at = 5 + accepted + cells
        columns = [row[at + i * w : at + (i + 1) * w] for i in range(7)]
        fed = sum(columns[1])  # the fed nodes come first
        tokens, _, parent, path, preds, node, owner = (c[:fed] for c in columns)
        head = [self.contexts[b][-1]] + (row[5 + accepted : at] if window else [])  # current token, window cells fed
        labels = tuple(self.trees[b].sources[s - part.start] if part.start <= s < part.stop else f"source {o}"
                       for s, o in zip(node, owner))
        top = None
        if k:  # the rows of the positions the row fed: its head, then its nodes (at L + i)
            flat = row[at + 7 * w :]
            top = torch.tensor([flat[r * k : (r + 1) * k] for r in [*range(len(head)), *range(cells + 1, cells + 1 + fed)]],
                               dtype=torch.long)
        return StepOutcome(position=len(self.contexts[b]) - 1, input_ids=torch.tensor(head + tokens, dtype=torch.long),
                           tree=DraftTree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parent, dtype=torch.long), labels),
                           tokens=row[5 : 5 + count], path=[i for i in range(fed) if path[i]], root_pred=root,
                           node_preds=torch.tensor(preds, dtype=torch.long), harvest=None, top=top,
                           window_tokens=cells if window else 0)

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (read: a step where rows leave)."""
        index = keep.tolist()
        for name in ("copies", "contexts", "trees", "done"):
            setattr(self, name, [getattr(self, name)[i] for i in index])


def row_sources(proposers: Proposer | Sequence[Proposer], max_depth: int = MAX_DRAFT_DEPTH,
                vocab_size: int | None = None) -> list[RowProposers]:
    """One `RowProposers` per proposer, in order: each keeps its name, statistics and evidence apart."""
    return [RowProposers(p, max_depth, vocab_size) for p in check_row_proposers(proposers)]
