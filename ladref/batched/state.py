"""Where every row of a batch stands, as tensors on the model's device: its text, budget and stop.

A row's text is its prompt followed by the tokens it has kept; its current token (the last one)
is the next step's first input. A step's accepted tokens are cut by each row's own stopping
rules (`BatchState.accept`: right after an EOS, at its budget), all rows at once, and a row that
stops is marked ``done``: the loop reads the flags once a step (or once every few steps, a stopped
row keeping nothing in between) and drops the finished rows then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class BatchState:
    """The live rows of a batch (B of them), on the model's device.

    Attributes:
        text: (B, X) long, each row's prompt then its kept tokens; positions past ``length`` are
            scratch (a step writes all its accepted tokens there before the cut).
        length: (B,) long, the tokens of each row's text; its current token is ``text[b, length - 1]``,
            at position ``length - 1``.
        prompt_len: (B,) long.
        produced: (B,) long, the new tokens each row has kept.
        budget: (B,) long, each row's max_new_tokens.
        done: (B,) bool, the rows that stopped (they leave at the next read).
        rows: (B,) long, each live row's index in the batch as given.
        eos: (E,) long, the ids that end a row's text (kept, as transformers does), padded with -1 (no
            token) to E = 4, 8, 16, ...: a captured step keeps its shape from one eos set to another.
        current: (B,) long, each row's current token, the last of its text.
    """

    text: torch.Tensor
    length: torch.Tensor
    prompt_len: torch.Tensor
    produced: torch.Tensor
    budget: torch.Tensor
    done: torch.Tensor
    rows: torch.Tensor
    eos: torch.Tensor
    current: torch.Tensor

    @classmethod
    def start(cls, prompts: Sequence[torch.Tensor], budgets: Sequence[int], eos: frozenset[int], reach: int,
              device: torch.device, columns: int | None = None) -> "BatchState":
        """The rows' state before their first step.

        Args:
            prompts: B (L_b,) long prompts (checked); budgets: B max_new_tokens.
            reach: the most tokens a step may accept (its deepest draft plus one): room past each budget.
            columns: X, the text's width (at least what the rows need); default just that, a captured
                step's the same at every call (a source's shapes follow it).
        """
        lengths = [int(p.shape[0]) for p in prompts]
        need = max(lengths) + max(budgets) + reach + 1
        text = torch.zeros(len(prompts), need if columns is None else max(columns, need), dtype=torch.long)
        for b, prompt in enumerate(prompts):
            text[b, : lengths[b]] = prompt
        length = torch.tensor(lengths, dtype=torch.long)
        on = dict(device=device)
        ends = sorted(eos) + [-1] * (max(4, 1 << (len(eos) - 1).bit_length()) - len(eos))
        return cls(text.to(**on), length.to(**on), length.clone().to(**on), torch.zeros(len(prompts), dtype=torch.long, **on),
                   torch.tensor(list(budgets), dtype=torch.long, **on), torch.zeros(len(prompts), dtype=torch.bool, **on),
                   torch.arange(len(prompts), **on), torch.tensor(ends, dtype=torch.long, **on),
                   torch.tensor([int(p[-1]) for p in prompts], dtype=torch.long, **on))

    @property
    def size(self) -> int:
        """B, the live rows."""
        return self.length.shape[0]

    def accept(self, tokens: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Append each row's accepted tokens up to its stop: right after an EOS, or at its budget.

        Args:
            tokens: (B, K) each row's accepted tokens, the first ``counts[b]`` of them real.
            counts: (B,) long, 1 <= counts[b] <= K.

        Returns:
            (B,) long, the tokens each row kept.
        """
        eos = torch.isin(tokens, self.eos).long()
        through_eos = (eos.cumsum(-1) == eos).sum(-1)  # the tokens up to the first EOS, it included (K: none)
        kept = torch.minimum(torch.minimum(counts, self.budget - self.produced), through_eos)
        kept = torch.where(self.done, 0, kept)  # a row that stopped inside a run of steps keeps nothing more
        self.text.scatter_(1, self.length[:, None] + torch.arange(tokens.shape[1], device=tokens.device), tokens)  # past kept: scratch
        self.length.add_(kept)
        self.produced.add_(kept)
        self.current.copy_(torch.where(kept > 0, tokens.gather(1, (kept[:, None] - 1).clamp(min=0))[:, 0], self.current))
        self.done.logical_or_((self.produced >= self.budget) | torch.isin(self.current, self.eos))  # a kept EOS is the last kept token
        return kept

    def accept_one(self, token: torch.Tensor) -> None:
        """`accept` for a step of one token a row ((B,) long): every live row keeps it (a stopped one: nothing)."""
        live = ~self.done
        self.text.scatter_(1, self.length[:, None], token[:, None])  # a stopped row's: scratch past its text
        self.length.add_(live)
        self.produced.add_(live)
        self.done.logical_or_((self.produced >= self.budget) | (torch.isin(token, self.eos) & live))
        self.current.copy_(torch.where(live, token, self.current))

    def texts(self) -> list[list[int]]:
        """Every row's text (prompt and kept tokens), in the batch's order: one read."""
        texts, lengths = self.text.tolist(), self.length.tolist()
        return [text[:length] for text, length in zip(texts, lengths)]

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the live rows `keep` ((B',) long indices, in order)."""
        for name in ("text", "length", "prompt_len", "produced", "budget", "done", "rows", "current"):
            setattr(self, name, getattr(self, name).index_select(0, keep))
