"""Prompt lookup for every row of a batch at once: n-gram matches over the device-resident text.

The batch form of `ladref.sources.prompt_lookup.PromptLookupProposer`. Each row's text (its prompt
and kept tokens, ``state.text[b, :length[b]]``) is searched for earlier occurrences of its last n
tokens, for every n up to ``max_ngram`` and every row at once, as in vLLM's GPU n-gram proposer:

1. the text's last G = ``max_ngram`` tokens are compared with the G tokens ending at every
   position (an ``unfold`` of the text, left-padded so no window reaches before it);
2. the run of equal tokens back from each position is the longest suffix that ends there; the
   longest run over the positions ending before the current token is the matched n;
3. the most recent ends of such runs (``topk`` of run * X + position) give the matches, most
   recent first, and the tokens after each are gathered from the text, cut at its end.

The search is O(X * G) per row and step (X: the text's width), independent of what a row found.
Nothing is learned but the text, which the state already holds. With a ``memory`` (a
`ladref.sources.suffix_trie.SuffixMemory`) the text searched is the memory's earlier outputs, made
a (C,) tensor at `begin` (C: the memory's ``max_tokens``, fixed, so a captured step keeps its
shape), then each row's text: negative ids separate the outputs (no run spans them, no draft
crosses them), and every row's output joins the memory when the call ends (`finish`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...sources.prompt_lookup import PromptLookupProposer, check_lookup
from ...sources.suffix_trie import SuffixMemory
from ..drafts import Drafts
from ..forms import BatchForm
from ..source import Outcome
from ..state import BatchState


@dataclass(frozen=True, eq=False)
class LookupShape:
    """The constant index tensors of a lookup over (B, X) texts, built once per decode.

    The text is padded with G - 1 places (-1) before it and D after it, so that no window and no
    copied position needs clamping: text position p is padded position p + G - 1.

    Attributes:
        width: X; max_ngram: G; draft_len: D.
        back: (G,) long, the padded offsets of the last G tokens from ``length + G - 1`` (oldest first).
        weight: (G,) long, 1..G: a mismatch at window place j weighs j + 1 (the newest place weighs G).
        base: (X,) long, ``e + X * G`` at each end position e (the key of a full run).
        shifted: (X,) long, ``e + G``: an end e is earlier than the current token when below ``length + G - 1``.
        ahead: (D,) long, ``G + t``: the padded position of the t-th token after an end, less the end.
    """

    width: int
    max_ngram: int
    draft_len: int
    back: torch.Tensor
    weight: torch.Tensor
    base: torch.Tensor
    shifted: torch.Tensor
    ahead: torch.Tensor

    @classmethod
    def of(cls, width: int, max_ngram: int, draft_len: int, device: torch.device) -> "LookupShape":
        g, ends = max_ngram, torch.arange(width, device=device)
        steps = torch.arange(max(g, draft_len), device=device)
        return cls(width, g, draft_len, steps[:g] - g, steps[:g] + 1, ends + width * g, ends + g, steps[:draft_len] + g)


def lookup_drafts(text: torch.Tensor, length: torch.Tensor, shape: LookupShape, min_ngram: int,
                  max_matches: int, separated: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every row's prompt lookup drafts: the continuations of its longest suffix's latest earlier occurrences.

    Args:
        text: (B, X) long token ids, the first ``length[b]`` of row b its text: non-negative ids,
            but for the separators (negative) of a corpus placed before the row's own tokens.
        length: (B,) long, at least 1.
        shape: the constants for X, G = ``max_ngram`` and D = ``draft_len``.
        min_ngram: the shortest suffix drafted from; max_matches: m, most matches drafted (most recent first).
        separated: the text holds separators (negative ids, a remembered corpus's) before the rows'
            own: a suffix matches up to the first one back, an end right before one drafts
            nothing, and a draft stops at one.

    Returns:
        tokens: (B, m * D) long, m chains: the tokens after each match (0 where not drafted);
        valid: (B, m * D) bool, the drafted ones (a continuation token exists before the text's end);
        evidence: (B, 1) long, the suffix length matched (0: none of at least ``min_ngram`` tokens).
    """
    rows, x, g = text.shape[0], shape.width, shape.max_ngram
    # 1. The last G tokens (oldest first), against the G tokens ending at every position e.
    padded = F.pad(text, (g - 1, shape.draft_len), value=-1)  # (B, G - 1 + X + D)
    last = length[:, None] + (g - 1)  # (B, 1): the padded position after the current token
    tail = padded.gather(1, last + shape.back)  # (B, G); a place before the text is never reached by a run
    if separated:  # a place before the row's own tokens may hold a separator: make it match nothing
        tail = tail.masked_fill(tail < 0, -2)
    windows = padded[:, : x + g - 1].unfold(1, g, 1)  # (B, X, G): [b, e, j] = text[b, e - (G-1) + j]
    # 2. The run of equal tokens back from e is G - (the newest mismatch's weight); key = e + X * run.
    newest = ((windows != tail[:, None, :]) * shape.weight).amax(-1)  # (B, X)
    key = torch.sub(shape.base, newest, alpha=x) * (shape.shifted < last)  # ends not before the current token: run 0
    if separated:  # an end followed by a separator continues with nothing
        key = key * (padded[:, g : g + x] >= 0)
    # 3. The longest run wins; among the ends with it, the most recent first.
    top, ends = key.topk(min(max_matches, x), dim=1)  # (B, m)
    if max_matches > x:  # more matches than positions: the extra ones stay empty
        top, ends = F.pad(top, (0, max_matches - x), value=-1), F.pad(ends, (0, max_matches - x))
    run = top // x  # (B, m), non-increasing: run[:, 0] is the matched suffix length
    found = run >= run[:, :1].clamp(min=min_ngram)  # (B, m) the matches drafted
    at = (ends[:, :, None] + shape.ahead).view(rows, -1)  # (B, m * D) the padded positions copied
    valid = (at.view(rows, max_matches, -1) < (last * found)[:, :, None]).view(rows, -1)
    tokens = padded.gather(1, at)
    if separated:  # a chain stops at its first separator
        valid = valid & (tokens >= 0).long().view(rows, max_matches, -1).cummin(-1).values.view(rows, -1).bool()
    return torch.where(valid, tokens, 0), valid, run[:, :1] * found[:, :1]


class BatchPromptLookup(BatchForm, reference=PromptLookupProposer, fixed_shape=True):
    """Prompt lookup decoding as a batched draft source: m chains of D copied tokens per row.

    Args:
        draft_len: D, most tokens copied after a match (the depth of each draft).
        max_ngram: longest suffix of the text looked up.
        min_ngram: shortest suffix looked up; a shorter match proposes nothing.
        max_matches: m, most matches whose continuations are proposed (most recent first), merged
            into one trie by the step.
        memory: a `SuffixMemory` whose outputs are searched before every row's text, and which
            every row's output joins when the call ends (`finish`); None: each row's text alone.

    Attributes:
        parents: (m * D,) long, m chains of D slots (static: the tree never changes shape).
        shape: the `LookupShape` of the batch's text (None before `begin`), the corpus included.
        corpus: (C,) long, the memory's outputs as `begin` found them, separated and left-padded
            with -1 (C: its ``max_tokens``); None without a memory.
    """

    name, topk, window = "prompt_lookup", 0, None

    def __init__(self, draft_len: int = 10, max_ngram: int = 3, min_ngram: int = 1, max_matches: int = 1,
                 memory: SuffixMemory | None = None) -> None:
        check_lookup(draft_len, max_ngram, min_ngram, max_matches)
        self.draft_len, self.max_ngram, self.min_ngram, self.max_matches = draft_len, max_ngram, min_ngram, max_matches
        self.depth, self.memory, self.corpus = draft_len, memory, None
        slots = torch.arange(max_matches * draft_len)
        self.parents = torch.where(slots % draft_len == 0, -1, slots - 1)  # m chains
        self.source = torch.zeros_like(slots)  # every slot this source's (`Drafts.source`)
        self.shape: LookupShape | None = None

    @classmethod
    def from_proposer(cls, proposer: PromptLookupProposer, max_depth: int, vocab_size: int) -> BatchPromptLookup:
        """The batch form of `proposer`: its settings and its memory, bound to the model's vocabulary
        (a memory of another model's tokens is refused, ValueError)."""
        if proposer.memory is not None:
            proposer.memory.bind(vocab_size)
        return cls(proposer.draft_len, proposer.max_ngram, proposer.min_ngram, proposer.max_matches, proposer.memory)

    def begin(self, state: BatchState) -> None:
        """The memory's outputs as a (C,) tensor, and the constants for the width searched, on the batch's device."""
        device = state.text.device
        if self.memory is not None:
            places = self.memory.corpus(self.memory.max_tokens)
            self.corpus = torch.tensor([-1] * (self.memory.max_tokens - len(places)) + places, dtype=torch.long, device=device)
        width = state.text.shape[1] + (0 if self.corpus is None else self.corpus.shape[0])
        self.shape = LookupShape.of(width, self.max_ngram, self.draft_len, device)
        self.parents, self.source = self.parents.to(device), self.source.to(device)

    def propose(self, state: BatchState) -> Drafts:
        """(B, m * D) drafts: chain c holds the continuation of the row's c-th most recent match."""
        text, length = state.text, state.length
        if self.corpus is not None:  # the remembered outputs, then each row's text
            text, length = torch.cat([self.corpus.expand(text.shape[0], -1), text], 1), length + self.corpus.shape[0]
        if self.shape is None or self.shape.width != text.shape[1] or self.shape.ahead.device != text.device:
            self.begin(state)
        tokens, valid, evidence = lookup_drafts(text, length, self.shape, self.min_ngram, self.max_matches, self.corpus is not None)
        return Drafts(tokens, self.parents, valid, self.source, evidence, self.max_matches == 1)

    def finish(self, outputs: Sequence[Sequence[int]]) -> None:
        """The call's end: every row's output (in the batch's order) joins the memory, one record each."""
        for output in outputs if self.memory is not None else ():
            self.memory.record(self.memory.open(), output)

    def learn(self, state: BatchState, outcome: Outcome, part: slice) -> None:
        """Nothing: the text the matches come from is ``state.text``."""

    def select(self, keep: torch.Tensor) -> None:
        """Nothing kept per row."""
