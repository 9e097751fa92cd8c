"""The n-gram pool of every row of a batch, as device tensors: `ladref.sources.ngram_pool.NGramPool` for B rows.

Each row keeps, for every first token k of the vocabulary, at most C continuations (the n-gram
minus its first token), each with the time it was last added: (B, V, C, N-1) ids and (B, V, C)
stamps (0: an empty slot). A lookup is one gather at [b, current token of b]; the most recent
continuations are those with the largest stamps. Memory: B x V x C x (N-1) ids (int32) and
B x V x C stamps; for SmolLM2 (V = 49152) with C = 7, N = 4, about 5.5 MB a row.

Adding m n-grams at once (`NGramPool.add` one by one, in order) as tensor operations: a key's
content after the adds is the C most recently added distinct continuations among what it held and
what was added (a list of C entries that moves each added item to its front holds exactly its C most recently added items), an
n-gram added again taking its latest time. Every added n-gram's key is rebuilt from those
candidates at once; adds sharing a key rebuild it to the same content, so their writes agree.
A step's W adds compare every pair of a key's candidates (few ops); a prompt's n-grams are merged
by sorting (`BatchPool.merge`), in one round, whatever the prompt's length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runs import lexsort


class BatchPool:
    """n-grams of size N keyed by their first token, for B rows.

    Args:
        rows: B; vocab_size: V; ngram_size: N; capacity: C, continuations kept per key.
        device: the model's.
    """

    def __init__(self, rows: int, vocab_size: int, ngram_size: int, capacity: int, device: torch.device) -> None:
        self.tokens = torch.zeros(rows, vocab_size, capacity, ngram_size - 1, dtype=torch.int32, device=device)
        self.stamps = torch.zeros(rows, vocab_size, capacity, dtype=torch.long, device=device)
        self.clock = torch.zeros((), dtype=torch.long, device=device)  # on the device: a captured step reads nothing
        self.ngram_size, self.capacity = ngram_size, capacity
        exact = vocab_size ** (ngram_size - 1) < 2**62  # a continuation written in base V fits 63 bits: compared as one id
        self.radix = vocab_size ** torch.arange(ngram_size - 1, device=device) if exact else None

    def add(self, keys: torch.Tensor, rest: torch.Tensor, valid: torch.Tensor) -> None:
        """Add m n-grams to every row, in order (as `NGramPool.add` one after the other).

        Args:
            keys: (B, m) long first tokens; rest: (B, m, N-1) long continuations; valid: (B, m) bool,
                the n-grams to add (the others change nothing).
        """
        rows, m = keys.shape
        c = self.capacity
        at = torch.arange(rows, device=keys.device)[:, None]
        held, held_at = self.tokens[at, keys].long(), self.stamps[at, keys]  # (B, m, C, N-1), (B, m, C)
        stamp = torch.where(valid, self.clock + 1 + torch.arange(m, device=keys.device), 0)  # (B, m)
        mine = valid[:, None, :] & (keys[:, :, None] == keys[:, None, :])  # (B, m, m): add j' goes to add j's key
        tokens = torch.cat([held, rest[:, None].expand(rows, m, m, -1)], dim=2)  # (B, m, C + m, N-1) candidates
        stamps = torch.cat([held_at, torch.where(mine, stamp[:, None, :], 0)], dim=2)  # (B, m, C + m), 0: absent
        code = (tokens * self.radix).sum(-1) if self.radix is not None else None  # (B, m, C + m): one id per continuation
        same = (code[:, :, :, None] == code[:, :, None, :]) if code is not None else \
            (tokens[:, :, :, None] == tokens[:, :, None, :]).all(-1)
        same &= stamps[:, :, None, :] > 0
        latest = torch.where(same, stamps[:, :, None, :], 0).amax(-1)  # each candidate's latest time
        stamps = torch.where(stamps == latest, stamps, 0)  # an n-gram added again: only its latest copy stays
        top, order = stamps.topk(c, dim=-1)  # (B, m, C) the C most recent
        self.tokens[at, keys] = tokens.gather(2, order[..., None].expand(rows, m, c, tokens.shape[-1])).int()
        self.stamps[at, keys] = top
        self.clock.add_(m)  # in place

    def seed(self, text: torch.Tensor, length: torch.Tensor) -> None:
        """Add every n-gram of each row's text (its first ``length[b]`` tokens), in order, at once (`merge`)."""
        n = self.ngram_size
        last = text.shape[1] - n + 1  # n-grams that fit the (B, X) text
        if last > 0:
            i = torch.arange(last, device=text.device)
            grams = text[:, i[:, None] + torch.arange(n, device=text.device)]  # (B, m, N)
            self.merge(grams[..., 0], grams[..., 1:], i + n <= length[:, None])

    def merge(self, keys: torch.Tensor, rest: torch.Tensor, valid: torch.Tensor) -> None:
        """`add` by sorting, for a prompt's many n-grams: O(B L log L) for L = m (C + 1) candidates,
        where `add` compares every pair of a key's candidates, B m (C + m)^2. More ops for a few.

        The candidates are every add's key's held continuations (a key of several adds appears as
        often) and the adds. Sorted by (key, continuation), equal ones form a run that keeps its latest
        copy; sorted again by (key, newest first), a key's C first are its new content.
        """
        rows, m = keys.shape
        c, vocab, device = self.capacity, self.tokens.shape[1], keys.device
        at = torch.arange(rows, device=device)[:, None]
        stamp = torch.where(valid, self.clock + 1 + torch.arange(m, device=device), 0)  # (B, m)
        stamps = torch.cat([self.stamps[at, keys].flatten(1), stamp], dim=1)  # (B, L), 0: absent
        tokens = torch.cat([self.tokens[at, keys].long().flatten(1, 2), rest], dim=1)  # (B, L, N-1)
        slot_keys = keys.repeat_interleave(c, dim=1)  # (B, m C): the key of each held slot
        key = torch.where(stamps > 0, torch.cat([slot_keys, keys], dim=1), vocab)  # (B, L), the absent last
        # 1. sort by (key, continuation); a run of equal candidates keeps its first copy of its latest time
        order = lexsort([key, *tokens.unbind(-1)])
        key, stamps, tokens = key.gather(1, order), stamps.gather(1, order), tokens[at, order]
        change = (key.diff(dim=1) != 0) | (tokens.diff(dim=1) != 0).any(-1)
        run = F.pad(change, (1, 0)).cumsum(1)  # (B, L)
        latest = torch.zeros_like(stamps).scatter_reduce_(1, run, stamps, "amax").gather(1, run)
        place = torch.arange(key.shape[1], device=device).expand_as(key)
        first = torch.where((stamps == latest) & (stamps > 0), place, key.shape[1])
        keep = place == torch.full_like(place, key.shape[1]).scatter_reduce_(1, run, first, "amin").gather(1, run)
        # 2. sort by (key, newest first): each add's key's content is its run's first C places
        stamps, key = torch.where(keep, stamps, 0), torch.where(keep, key, vocab)
        order = lexsort([key, -stamps])
        key, stamps, tokens = key.gather(1, order), stamps.gather(1, order), tokens[at, order]
        # (B, m C) each add's key's C places, all inside: what a key does not keep of its candidates is absent, sorted last
        slots = (torch.searchsorted(key.contiguous(), keys.contiguous())[..., None] + torch.arange(c, device=device)).flatten(1)
        held = (key.gather(1, slots) == slot_keys) & (stamps.gather(1, slots) > 0)
        self.tokens[at, keys] = tokens[at, slots].view(rows, m, c, -1).int()
        self.stamps[at, keys] = torch.where(held, stamps.gather(1, slots), 0).view(rows, m, c)
        self.clock.add_(m)  # in place

    def candidates(self, current: torch.Tensor, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's up to `limit` most recent continuations of its `current` token: (B, g, N-1) long
        and (B, g) bool (whether the slot holds one), g = min(limit, C)."""
        at = torch.arange(current.shape[0], device=current.device)
        stamps, order = self.stamps[at, current].topk(min(limit, self.capacity), dim=-1)  # (B, g)
        tokens = self.tokens[at, current].gather(1, order[..., None].expand(*order.shape, self.ngram_size - 1))
        return tokens.long(), stamps > 0

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep`."""
        self.tokens, self.stamps = self.tokens.index_select(0, keep), self.stamps.index_select(0, keep)

