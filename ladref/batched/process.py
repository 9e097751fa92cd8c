"""transformers logits processors in the engine: every row's root and fed node scored with its own context.

The reference applies a processor position by position as it walks the tree
(`ladref.sampling.GreedyChooser`, `ladref.sampling.SamplingChooser`): the logits after a position
go through ``processor(context, scores)`` with that position's context, the committed sequence
(prompt included) and the drafted tokens down to it. A batched step does the same for every row's
root (the current token) and every fed node at once, before verification:
  # the context of row b's root: its text, ``text[b, :length[b]]`` (L_b tokens);
  # of its fed node i at depth d: that text, then the tokens of i's ancestors and i's own (L_b + d);
  # the entries whose contexts have one length c are one call: (n_c, c) input_ids, (n_c, V) scores.
A processor takes input_ids of one length, hence the groups (one call per distinct length, the
rows and nodes of that length stacked). Grouping needs the lengths on the host: a step with a
processor reads the (B,) lengths and (B, w) depths once, besides the loop's read; a step without
one runs none of this. Scores are processed in float64, as the reference's choosers process them.
Greedy verification then takes the argmax of the processed scores, a sampler warps them.
"""

from __future__ import annotations

import torch

from ..sampling import Processor
from .drafts import Fed


def path_tokens(fed: Fed) -> torch.Tensor:
    """(B, w, D) long, the tokens from the root down to each fed node: column k - 1 holds its
    ancestor at depth k (the node itself at its own depth; zeros past it). Read from the merged
    trie's spelled paths (`ladref.batched.drafts.Merged.spelled`: a node's tokens up to the root), reversed."""
    spelled = fed.merged.spelled  # (B, n, D)
    up = spelled.gather(1, fed.node[..., None].expand(-1, -1, spelled.shape[2]))  # (B, w, D): each fed node's, itself first
    columns = torch.arange(spelled.shape[2], device=up.device)  # (D,)
    down = up.gather(2, (fed.depth[..., None] - 1 - columns).clamp(min=0))  # column k - 1: the ancestor at depth k
    return down.masked_fill(columns >= fed.depth[..., None], 0)


def contexts(text: torch.Tensor, length: torch.Tensor, paths: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor,
             size: int) -> torch.Tensor:
    """(n, size) long, the contexts of n entries of one length `size`: row ``rows[e]``'s text, then
    its path ``paths[rows[e], slots[e]]`` (slot 0: the root, no path; slot 1 + i: fed node i).

    Args:
        text: (B, X) long, the rows' texts; length: (B,) long, L_b.
        paths: (B, 1 + w, D) long, the path tokens of the root (zeros) and of each fed node.
        rows, slots: (n,) long, each entry's row and slot; size: c = L_b + the entry's depth, the same for all n.
    """
    columns = torch.arange(size, device=text.device)  # (c,)
    start = length[rows][:, None]  # (n, 1): where the path begins
    own = text.index_select(0, rows)
    own = own[:, :size] if own.shape[1] >= size else torch.nn.functional.pad(own, (0, size - own.shape[1]))
    path = paths[rows, slots]  # (n, D)
    drafted = path.gather(1, (columns - start).clamp(0, path.shape[1] - 1))  # (n, c): the path's token at each column past L_b
    return torch.where(columns < start, own, drafted)


def process(processor: Processor, text: torch.Tensor, length: torch.Tensor, root: torch.Tensor,
            nodes: torch.Tensor | None = None, fed: Fed | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every row's root and fed node logits, processed with their own contexts (one call per context length).

    Args:
        processor: a transformers `LogitsProcessorList` (or any ``(input_ids, scores) -> scores``).
        text: (B, X) long, the rows' texts (`ladref.batched.state.BatchState.text`); length: (B,) long, L_b,
            the current token the last of the text.
        root: (B, V) the logits after each row's current token.
        nodes: (B, w, V) the logits after each fed node, with `fed` (None: a step with no node).

    Returns:
        (root (B, V), nodes (B, w, V) or None), float64 scores; a padding node (not fed) keeps its logits.
    """
    rows, vocab = root.shape
    width = 0 if nodes is None else nodes.shape[1]
    scores = root.double()[:, None] if width == 0 else torch.cat([root[:, None], nodes], dim=1).double()  # (B, 1 + w, V)
    if width:
        paths = torch.nn.functional.pad(path_tokens(fed), (0, 0, 1, 0))  # (B, 1 + w, D): the root's path is empty
        depth = torch.cat([torch.zeros_like(fed.depth[:, :1]), fed.depth], dim=1)  # (B, 1 + w)
        valid = torch.cat([torch.ones_like(fed.valid[:, :1]), fed.valid], dim=1)
    else:
        paths = torch.zeros(rows, 1, 1, dtype=torch.long, device=root.device)
        depth, valid = torch.zeros(rows, 1, dtype=torch.long, device=root.device), torch.ones(rows, 1, dtype=torch.bool, device=root.device)
    size = (length[:, None] + depth).masked_fill(~valid, -1)  # (B, 1 + w): each entry's context length, -1: not fed
    groups: dict[int, list[int]] = {}
    for e, c in enumerate(size.flatten().tolist()):  # the one read: every entry's context length
        if c >= 0:
            groups.setdefault(c, []).append(e)
    out = scores.flatten(0, 1).clone()  # (B (1 + w), V)
    for c, group in sorted(groups.items()):
        entries = torch.tensor(group, dtype=torch.long, device=root.device)
        ids = contexts(text, length, paths, entries // (1 + width), entries % (1 + width), c)
        out.index_copy_(0, entries, processor(ids, out.index_select(0, entries)).to(out.dtype))
    out = out.view(rows, 1 + width, vocab)
    return out[:, 0], (None if nodes is None else out[:, 1:])
