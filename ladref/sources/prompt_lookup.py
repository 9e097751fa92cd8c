"""Prompt lookup decoding: drafts copied from earlier text that ends like the text so far.

Input-grounded tasks (summaries, code edits, retrieval-augmented answers) repeat long spans of
their prompt. The proposer finds the most recent earlier occurrences of the last n tokens of the
sequence (prompt plus output; n from `max_ngram` down to `min_ngram`, the longest that matches
wins) and proposes the tokens that followed each of them, merged into a trie. Nothing is
learned but the text itself.

With a ``memory`` (a `ladref.sources.suffix_trie.SuffixMemory`, the one suffix decoding keeps) it
also remembers across requests: the earlier outputs the memory kept when the request began
(`SuffixMemory.corpus`, its newest ``max_tokens`` places) are searched as if they came before the
prompt, each on its own (no n-gram spans two of them, no draft runs past one's end), so on an
equally long match the request's own text wins; the request's output is recorded into the memory.
Its batch form searches that memory on the device, inside a captured step
(`ladref.batched.sources.lookup`).
"""

from __future__ import annotations

from collections.abc import Sequence


from ..config import check_int
from ..proposer import DraftSource, StepOutcome
from ..tree import DraftTree
from .suffix_trie import SuffixMemory


def check_lookup(draft_len: int, max_ngram: int, min_ngram: int, max_matches: int) -> None:
    """Prompt lookup's settings (`PromptLookupProposer`, and its batch form).

    Raises:
        TypeError, ValueError: a setting that is not an int >= 1, or ``min_ngram > max_ngram``.
    """
    check_int("draft_len", draft_len, 1)
    check_int("max_ngram", max_ngram, 1)
    check_int("min_ngram", min_ngram, 1)
    check_int("max_matches", max_matches, 1)
    if min_ngram > max_ngram:
        raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")


class PromptLookupProposer(DraftSource):
    """Drafts from n-gram matches in the prompt and the text generated so far.

    Attributes:
        evidence: the length of the suffix the last proposal matched (0: none); adaptive
            decoding learns acceptance apart per length (`ladref.batched.policy.BatchPolicy`).

    Args:
        draft_len: most tokens copied after a match (the depth of each draft).
        max_ngram: longest suffix of the text looked up.
        min_ngram: shortest suffix looked up; a shorter match proposes nothing.
        max_matches: most matches whose continuations are proposed (most recent first).
        memory: a `SuffixMemory` kept across calls: its outputs are searched before the prompt, and
            each request's output joins it (so give a decoder's other sources memories of their own).
    """

    name = "prompt_lookup"

    def __init__(self, draft_len: int = 10, max_ngram: int = 3, min_ngram: int = 1, max_matches: int = 1,
                 memory: SuffixMemory | None = None) -> None:
        check_lookup(draft_len, max_ngram, min_ngram, max_matches)
        if memory is not None and not isinstance(memory, SuffixMemory):
            raise TypeError(f"memory must be a SuffixMemory or None, got {type(memory).__name__}")
        self.draft_len, self.max_ngram, self.min_ngram, self.max_matches = draft_len, max_ngram, min_ngram, max_matches
        self.memory, self.key = memory, None
        self.text: list[int] = []  # the memory's outputs (separated by -1), then the request's prompt and output
        self.start = self.since = 0  # where the request's text starts; where the last separator's segment does
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> positions where an occurrence ends
        self.evidence = 0

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: the memory's outputs (if any, as it holds them now), then the prompt, indexed;
        a new record in the memory for the request's output."""
        self.text, self.ends, self.since = [], {}, 0
        if self.memory is not None:
            self._append(self.memory.corpus(self.memory.max_tokens))
            self.key = self.memory.open()
        self.start = len(self.text)
        self._append(prompt)

    def _append(self, tokens: Sequence[int]) -> None:
        """Extend the text and index every n-gram (min_ngram <= n <= max_ngram) that now ends in it,
        none across a separator (-1: the end of a remembered output)."""
        for token in tokens:
            self.text.append(int(token))
            end = len(self.text) - 1
            if token < 0:
                self.since = end + 1
            for n in range(self.min_ngram, min(self.max_ngram, end + 1 - self.since) + 1):
                self.ends.setdefault(tuple(self.text[end - n + 1 : end + 1]), []).append(end)

    def propose(self, context: Sequence[int]) -> DraftTree:
        """The continuations of the most recent earlier occurrences of the longest matching suffix
        (a remembered output's, cut at its end, count as older than the request's)."""
        last, self.evidence = len(self.text) - 1, 0
        for n in range(min(self.max_ngram, len(self.text) - self.start), self.min_ngram - 1, -1):
            earlier = [end for end in self.ends.get(tuple(self.text[-n:]), ()) if end < last and self.text[end + 1] >= 0]
            if earlier:
                drafts = [self._after(end) for end in reversed(earlier[-self.max_matches :])]
                self.evidence = n
                return DraftTree.from_paths(drafts, self.name)
        return DraftTree.empty()

    def _after(self, end: int) -> list[int]:
        """The (at most ``draft_len``) tokens after position `end`, up to a separator."""
        after = self.text[end + 1 : end + 1 + self.draft_len]
        return after[: after.index(-1)] if -1 in after else after

    def learn(self, outcome: StepOutcome) -> None:
        """The committed tokens join the text and, with a memory, the request's record there."""
        self._append(outcome.tokens)
        if self.memory is not None:
            self.memory.record(self.key, outcome.tokens)
