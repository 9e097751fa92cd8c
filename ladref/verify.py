"""Verification of a draft tree: greedy (`verify_greedy`) and chooser-driven (`verify_chosen`).

Accept rule, walking down from the current token (the root):
  # the model's argmax after the current token is y_1; after the node reached at depth j it is y_{j+1};
  # descend into the child whose token equals y_j, for as long as there is one (the path reproduces greedy);
  # the accepted tokens are the path's tokens plus the next y: 1 + depth tokens, exactly greedy's output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .tree import DraftTree


@dataclass(frozen=True)
class Verdict:
    """Outcome of verification.

    Attributes:
        tokens: (k+1,) the accepted tokens: k drafted tokens then the model's own.
        path: the k accepted tree nodes, root's child first (their K/V are committed).
    """

    tokens: torch.Tensor
    path: list[int]

    @property
    def matched(self) -> int:
        """k, drafted tokens accepted."""
        return len(self.path)


def verify_greedy(tree: DraftTree, root_pred: int, node_preds: torch.Tensor) -> Verdict:
    """Find the longest root path of `tree` that greedy decoding would produce.

    Args:
        tree: the draft tree (n nodes) continuing the current token.
        root_pred: y_1, the model's argmax after the current token.
        node_preds: (n,) the model's argmax after each node.

    Returns:
        The `Verdict`; an empty tree accepts exactly y_1, one greedy step.
    """
    tokens, preds = tree.tokens.tolist(), node_preds.tolist()
    path, target, node = [], int(root_pred), -1
    while True:
        match = next((child for child in tree.children.get(node, ()) if tokens[child] == target), None)
        if match is None:
            break
        path.append(match)
        node, target = match, preds[match]
    return Verdict(torch.tensor([tokens[i] for i in path] + [target]), path)


def verify_chosen(
    tree: DraftTree,
    root_logits: torch.Tensor,
    node_logits: torch.Tensor,
    choose: Callable[[Sequence[int], torch.Tensor, Sequence[int]], int],
    context: Sequence[int],
) -> Verdict:
    """Walk the tree, letting `choose` pick each token (sampling, or argmax after logits processors).

    Accept rule, at the node reached so far (the root first):
      # its children's tokens are the drafts; choose(context + chosen, logits here, drafts) picks token y;
      # if y is a draft, descend into that child and read the next logits there;
      # otherwise, or at a leaf, stop after y.

    Args:
        tree: the draft tree (n nodes) continuing the current token.
        root_logits: (V,) the model's logits after the current token.
        node_logits: (n, V) the model's logits after each node.
        choose: picks one token from (context, logits, draft tokens), e.g. `SamplingChooser.choose`.
        context: the committed sequence, ending with the current token.

    Returns:
        The `Verdict`: the chosen tokens and the path of drafts among them.
    """
    tokens = tree.tokens.tolist()
    node, logits, chosen, path = -1, root_logits, [], []
    while True:
        children = tree.children.get(node, [])
        token = int(choose([*context, *chosen], logits, [tokens[c] for c in children]))
        chosen.append(token)
        node = next((c for c in children if tokens[c] == token), None)
        if node is None:
            return Verdict(torch.tensor(chosen), path)
        path.append(node)
        logits = node_logits[node]
