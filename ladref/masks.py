"""Inputs and attention mask of one combined step: ``[current | lookahead window | draft tree]``.

The step input is the lookahead branch (paper Fig. 5) followed by the draft tree (`ladref.tree`):

* the lookahead branch is the (N-1, W) window flattened row by row; its cell (0, 0) is the
  current token (the last accepted one), so cell (r, c) sits at flat index ``r * W + c`` and at
  position ``p + r + c`` (p = position of the current token). A step without a window feeds the
  current token alone, at flat index 0;
* tree node i sits at flat index ``L + i`` (L = the lookahead branch's length) and at position
  ``p + depth(i)``.

Who may see whom (besides the KV cache, which every token sees):

* row 0 is a causal block: cell (0, c) sees cells (0, 0..c);
* cell (r >= 1, c) sees row 0 up to column c and the cells above it in its column,
  (1..r, c): the sequence it sees is a Jacobi trajectory ending in its own diagonal;
* a tree node sees the current token, its ancestors and itself;
* no lookahead token sees a tree node and no tree node sees a lookahead token other than the
  shared current token.

With G pool n-grams laid out as G separate chains (`DraftTree.chains`) this is exactly the
paper's Fig. 5; merged into a trie (`DraftTree.from_paths`), shared prefixes are fed once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .tree import DraftTree


@dataclass(frozen=True, eq=False)
class StepLayout:
    """Where each part of a combined step lives in its flat input.

    Attributes:
        window_size: W, columns of the lookahead window; 0 for a step without one.
        ngram_size: N, the window has N-1 rows (unused when window_size is 0).
        tree: the draft tree verified this step.
    """

    window_size: int
    ngram_size: int
    tree: DraftTree

    @property
    def lookahead_len(self) -> int:
        """L: (N-1) * W tokens of the lookahead branch, current token included (1 without a window)."""
        return (self.ngram_size - 1) * self.window_size if self.window_size else 1

    @property
    def length(self) -> int:
        """q = L + n, the tokens fed to the model this step."""
        return self.lookahead_len + len(self.tree)

    @property
    def is_causal(self) -> bool:
        """True when the step is one plain causal sequence (no window, the tree a single chain)."""
        return self.lookahead_len == 1 and self.tree.is_chain()

    def last_row_index(self) -> torch.Tensor:
        """(W,) flat indices of the newest window row (row N-2), whose outputs form the next row."""
        start = (self.ngram_size - 2) * self.window_size
        return torch.arange(start, start + self.window_size)

    def tree_index(self) -> torch.Tensor:
        """(n,) flat indices of the tree nodes."""
        return self.lookahead_len + torch.arange(len(self.tree))

    def position_offsets(self) -> torch.Tensor:
        """(q,) position of each token relative to the current token."""
        W, N = self.window_size, self.ngram_size
        if W:
            window = torch.arange(N - 1).repeat_interleave(W) + torch.arange(W).repeat(N - 1)  # row + column
        else:
            window = torch.zeros(1, dtype=torch.long)
        return torch.cat([window, self.tree.depths])

    def allowed(self) -> torch.Tensor:
        """(q, q) bool, allowed[i, j] = token i may attend to token j (the readable mask)."""
        W, N, L = self.window_size, self.ngram_size, self.lookahead_len
        allowed = torch.zeros(self.length, self.length, dtype=torch.bool)
        if W:
            r = torch.arange(N - 1).repeat_interleave(W)  # (L,) row of each lookahead token
            c = torch.arange(W).repeat(N - 1)  # (L,) column of each lookahead token
            row0_prefix = (r[None, :] == 0) & (c[None, :] <= c[:, None])
            own_column = (r[None, :] >= 1) & (c[None, :] == c[:, None]) & (r[None, :] <= r[:, None])
            allowed[:L, :L] = row0_prefix | own_column
        else:
            allowed[0, 0] = True
        allowed[L:, L:] = self.tree.ancestors()
        allowed[L:, 0] = True  # drafts continue the current token
        return allowed


@dataclass(frozen=True)
class StepInputs:
    """Model inputs of one combined step.

    Attributes:
        input_ids: (q,) token ids.
        position_ids: (q,) absolute positions.
        allowed: (q, q) bool who-may-see-whom matrix.
        layout: the `StepLayout` that maps flat indices back to window cells and tree nodes.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    allowed: torch.Tensor
    layout: StepLayout


def build_step_inputs(current: int, window: torch.Tensor | None, tree: DraftTree, position: int) -> StepInputs:
    """Assemble ids, positions and mask for ``[current | window | tree]``.

    Args:
        current: the last accepted token; it replaces window cell (0, 0).
        window: (N-1, W) long, the lookahead window, oldest row first; None for no lookahead branch.
        tree: the draft tree (its nodes continue `current`).
        position: absolute position p of the current token.

    Returns:
        The `StepInputs` (all on the CPU).
    """
    if window is None:
        layout, flat = StepLayout(0, 0, tree), torch.tensor([current])
    else:
        rows, W = window.shape
        layout = StepLayout(W, rows + 1, tree)
        flat = window.flatten().clone()
        flat[0] = current
    input_ids = torch.cat([flat, tree.tokens])
    return StepInputs(input_ids, position + layout.position_offsets(), layout.allowed(), layout)


def prepend_prompt(prompt: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor | None, allowed: torch.Tensor | None,
                   keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """A step's inputs with P prompt tokens before them: one pass that caches the prompt and runs the step.

    The prompt is causal; every step token sees the whole prompt, and the step its own mask.

    Args:
        prompt: (P,) ids at positions 0 .. P-1 (the cache is empty).
        input_ids: (q,) the step's ids; position_ids: (q,) or None (P + arange(q)).
        allowed: (q, q) the step's mask, or None (causal); keep: (k,) step rows, or None (all q).

    Returns:
        ids (P+q,); positions (P+q,), or None when the step's were None; allowed (P+q, P+q), or
        None when the step's was None (all of it causal); keep (k,) shifted by P, or (q,) for None.
    """
    p, q = prompt.shape[0], input_ids.shape[0]
    ids = torch.cat([prompt.to(input_ids.device), input_ids])
    positions = None if position_ids is None else torch.cat([torch.arange(p, device=position_ids.device), position_ids])
    if allowed is not None:
        whole = torch.ones(p + q, p + q, dtype=torch.bool, device=allowed.device).tril_()
        whole[p:, p:] = allowed
        allowed = whole
    return ids, positions, allowed, p + (torch.arange(q) if keep is None else keep)


def static_additive(allowed: torch.Tensor, length: torch.Tensor, max_length: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of a step over a whole static KV cache of `max_length` slots.

    Slots below `length` hold the committed context (every query sees them); the step's own
    tokens are written at slots length .. length+q-1 and see each other as `allowed` says; all
    other slots (stale entries of earlier steps, unused space) are hidden. Built from tensors
    only, so that one captured graph serves every step.

    Args:
        allowed: (q, q) bool mask within the step.
        length: () long tensor, committed tokens in the cache.
        max_length: M, slots of the static cache.
        dtype: the model's floating dtype.

    Returns:
        (1, 1, q, M) tensor on `allowed`'s device.
    """
    q = allowed.shape[0]
    slots = torch.arange(max_length, device=allowed.device)
    offset = slots - length  # (M,) position of each slot inside the step
    in_step = (offset >= 0) & (offset < q)
    visible = (slots < length) | (in_step & allowed[:, offset.clamp(0, q - 1)])  # (q, M)
    mask = torch.zeros(q, max_length, dtype=dtype, device=allowed.device)
    return mask.masked_fill(~visible, torch.finfo(dtype).min)[None, None]


def to_additive(allowed: torch.Tensor, past_len: int, dtype: torch.dtype) -> torch.Tensor:
    """The float form transformers needs: 0 where allowed, finfo(dtype).min elsewhere.

    Args:
        allowed: (q, q) bool mask within the step.
        past_len: tokens already in the KV cache; every query sees all of them.
        dtype: the model's floating dtype (a bool 4-D mask is misread by eager attention).

    Returns:
        (1, 1, q, past_len + q) tensor on `allowed`'s device.
    """
    q = allowed.shape[0]
    mask = torch.zeros(q, past_len + q, dtype=dtype, device=allowed.device)
    mask[:, past_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def render(allowed: torch.Tensor, labels: list[str] | None = None) -> str:
    """Draw a boolean mask as text ('#' = may attend, '.' = may not), one row per query."""
    labels = [str(i) for i in range(allowed.shape[0])] if labels is None else labels
    width = max(len(label) for label in labels)
    lines = [f"{label:>{width}} " + "".join("#" if v else "." for v in row) for label, row in zip(labels, allowed.tolist())]
    return "\n".join(lines)
