"""Greedy verification of every row's fed draft nodes at once: one argmax, the tree's ancestors, no walk.

The accept rule of `ladref.verify.verify_greedy`, row by row, as tensor operations:
  # a node matches when its token is the model's argmax after its parent (the root: the current token);
  # a node is on greedy's path when it and all its ancestors match; the deepest such node wins;
  # the accepted tokens are that path's tokens plus the argmax after its last node (1 + depth tokens).
Two siblings hold different tokens in a trie, so at most one node per depth matches under a
matching parent: the deepest matching node and its ancestors are the walk's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .drafts import Fed


@dataclass(frozen=True, eq=False)
class Verdict:
    """What each row's step accepted.

    Attributes:
        tokens: (B, K) long, the accepted tokens: ``depth[b]`` drafted ones, then the model's own (K: 1 + the deepest a path can be).
        count: (B,) long, accepted tokens, ``depth + 1``.
        entries: (B, K) long, the step entries to keep in path order: the current token's (0), then
            the accepted nodes' (K = 1 + the deepest a path can be; read up to ``count``).
        depth: (B,) long, drafted tokens accepted.
        path: (B, w) bool, the accepted fed nodes.
    """

    tokens: torch.Tensor
    count: torch.Tensor
    entries: torch.Tensor
    depth: torch.Tensor
    path: torch.Tensor


def parent_preds(root_pred: torch.Tensor, node_preds: torch.Tensor, fed: Fed) -> torch.Tensor:
    """(B, w) greedy's token at each fed node: the argmax after its parent (the ancestor one level
    up; the current token for a child of the root)."""
    up = fed.ancestors & (fed.depth[:, None, :] == fed.depth[:, :, None] - 1)  # (B, w, w): [i, j] = j is i's parent
    parent = torch.where(up, torch.arange(fed.width, device=up.device), 0).amax(-1)  # (B, w) j, or 0 for a child of the root
    return torch.where(fed.depth == 1, root_pred[:, None], node_preds.gather(1, parent))


def path_verdict(fed: Fed, end: torch.Tensor, depth: torch.Tensor, greedy: torch.Tensor, length: int, deepest: int) -> Verdict:
    """The verdict of the path ending at fed node `end` (`depth` 0: no node), `greedy` giving the
    tokens: ``greedy[:, 0]`` after the current token, ``greedy[:, 1 + i]`` after fed node i.

    Args:
        end: (B,) long, the fed position of the path's last node (any where depth is 0).
        depth: (B,) long; greedy: (B, 1 + w) long.
        length: L, the step position of the first node; deepest: the deepest a node can be.
    """
    rows, w = fed.tokens.shape
    path = fed.ancestors.gather(1, end[:, None, None].expand(rows, 1, w))[:, 0] & (depth > 0)[:, None]  # (B, w)
    by_depth = torch.zeros(rows, w + 1, dtype=torch.long, device=path.device)  # column d - 1: the path's node at depth d
    by_depth.scatter_(1, torch.where(path, fed.depth - 1, w), torch.arange(w, device=path.device).expand(rows, w))
    k = min(deepest, w)  # the deepest a path can be
    tokens = torch.cat([greedy[:, :1], greedy[:, 1:].gather(1, by_depth[:, :k])], dim=1)  # y_1, then after each path node
    entries = torch.cat([torch.zeros_like(depth)[:, None], length + by_depth[:, :k]], dim=1)
    return Verdict(tokens, depth + 1, entries, depth, path)


def verify_greedy(root_pred: torch.Tensor, node_preds: torch.Tensor, fed: Fed, length: int, deepest: int) -> Verdict:
    """The longest fed path greedy decoding agrees with, plus one token, for every row.

    Args:
        root_pred: (B,) the argmax after the current token (y_1).
        node_preds: (B, w) the argmax after each fed node.
        fed: the fed nodes; length: L, the step position of the first one; deepest: the deepest a
            node can be (bounds the entries to keep).
    """
    if fed.width == 0:  # nothing drafted: one greedy token
        zero = torch.zeros_like(root_pred)
        return Verdict(root_pred[:, None], zero + 1, zero[:, None], zero, fed.valid)
    match = fed.valid & (fed.tokens == parent_preds(root_pred, node_preds, fed))
    on_path = (fed.ancestors & match[:, None, :]).sum(-1) == fed.depth  # a node and all its ancestors match
    depth, end = torch.where(on_path, fed.depth, 0).max(-1)
    return path_verdict(fed, end, depth, torch.cat([root_pred[:, None], node_preds], dim=1), length, deepest)
