"""SuffixDecoding (Oliaro et al., arXiv 2411.04975): drafts from all that followed the text's end before, across requests too.

Prompt lookup copies what followed the LATEST earlier occurrence of the last few tokens. Suffix
decoding counts them all: in a suffix trie of the text (`ladref.sources.suffix_trie`), the node
of a pattern (a suffix of the text that occurred before, at most ``max_match`` tokens) has one
child per token that ever followed it, counted. A draft tree grows best first from there: a
node's estimated probability is the product, along its path, of the share of each parent's
occurrences that went on with the child's token (the present occurrence, which has not gone on
yet, counts too: a pattern seen once before gives 1/2), the most probable node is drafted next,
nodes below ``min_prob`` never. A long
match earns a big tree: a pattern of L tokens drafts at most ``spec_factor * L`` nodes (the
paper's alpha; ``max_nodes`` caps it), ``max_depth`` deep.

Every pattern length grows its tree, in two tries: the request's own (prompt and output, grown
as tokens are committed) and, optionally, a `SuffixMemory` shared across requests (the outputs of
earlier and running requests, the oldest evicted past a bound in tokens). The tree with the
highest score (the sum of its nodes' probabilities: the tokens it expects accepted) is proposed,
as ArcticInference does; its pattern's length is the proposal's ``evidence``. With
``merge_matches=True`` every matched pattern, of every length and in both tries, grows ONE tree
instead (`grow` from all their nodes at once, the budget set by the longest match): a big tree
then holds the alternatives of several patterns, not only the deeper guesses of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..config import check_int
from ..facts import ModelFacts
from ..proposer import DraftSource, StepOutcome
from ..tree import DraftTree
from .suffix_trie import SuffixMemory, SuffixTrie, grow


def check_positive(name: str, value: object) -> None:
    """Raise TypeError unless `value` is a real number (bools refused), ValueError unless it is > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a positive number, got {type(value).__name__}")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value}")


@dataclass(frozen=True)
class SuffixDraft:
    """A draft tree grown from a match, before it becomes a `DraftTree`.

    Attributes:
        tokens: the drafted tokens, parents first; parents: each one's parent index (-1: the root).
        score: the sum of the nodes' estimated probabilities (the tokens the draft expects accepted).
        match: L, the length of the matched pattern.
    """

    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()
    score: float = 0.0
    match: int = 0


class SuffixProposer(DraftSource):
    """SuffixDecoding's draft source: the request's suffix trie and, optionally, a shared `SuffixMemory`.

    Args:
        max_depth: the deepest draft.
        max_nodes: most nodes of a draft tree (the cap on ``spec_factor * L``).
        spec_factor: alpha, draft nodes allowed per matched token: a pattern of L tokens drafts at
            most alpha * L nodes (rounded down), so a short match drafts little.
        min_prob: the least estimated probability of a drafted node, in [0, 1).
        max_match: the longest pattern looked up.
        memory: a `SuffixMemory` kept across calls (and shared by a batch's rows), or None: the
            request's own text only.
        merge_matches: grow one tree from every matched pattern (every length, the request's trie
            and the memory's) instead of proposing the best-scoring pattern's tree.
        vocab_size: the model's vocabulary size, which a memory is checked against (`for_model` sets it).

    Attributes:
        evidence: L, the length of the pattern behind the last proposal (0: none); adaptive
            decoding learns acceptance apart per length (`ladref.batched.policy.BatchPolicy`).
        trie: the request's `SuffixTrie`, of depth max_match + max_depth (prompt and committed tokens).
    """

    name = "suffix"

    def __init__(self, max_depth: int = 12, max_nodes: int = 16, spec_factor: float = 1.0, min_prob: float = 0.1,
                 max_match: int = 12, memory: SuffixMemory | None = None, vocab_size: int | None = None,
                 merge_matches: bool = False) -> None:
        check_int("max_depth", max_depth, 1)
        check_int("max_nodes", max_nodes, 1)
        check_positive("spec_factor", spec_factor)
        check_int("max_match", max_match, 1)
        if isinstance(min_prob, bool) or not isinstance(min_prob, (int, float)):
            raise TypeError(f"min_prob must be a number in [0, 1), got {type(min_prob).__name__}")
        if not 0 <= min_prob < 1:
            raise ValueError(f"min_prob must be a number in [0, 1), got {min_prob}")
        if not isinstance(merge_matches, bool):
            raise TypeError(f"merge_matches must be a bool, got {type(merge_matches).__name__}")
        if memory is not None and not isinstance(memory, SuffixMemory):
            raise TypeError(f"memory must be a SuffixMemory or None, got {type(memory).__name__}")
        if vocab_size is not None and memory is not None:
            memory.bind(vocab_size)
        elif vocab_size is not None:
            check_int("vocab_size", vocab_size, 1)
        self.max_depth, self.max_nodes, self.spec_factor, self.min_prob = max_depth, max_nodes, spec_factor, min_prob
        self.max_match, self.memory, self.vocab_size, self.merge_matches = max_match, memory, vocab_size, merge_matches
        self.trie, self.ends, self.key, self.evidence = SuffixTrie(max_match + max_depth), [], None, 0

    @classmethod
    def for_model(cls, model: torch.nn.Module, **options) -> "SuffixProposer":
        """A proposer that knows `model`'s vocabulary: a memory serving another model is refused here, before any forward pass."""
        return cls(vocab_size=ModelFacts.of(model).vocab_size, **options)

    def __deepcopy__(self, memo: dict) -> "SuffixProposer":
        """A fresh proposer with the same settings and the SAME memory: each row of a batch drafts
        with such a copy (`ladref.batched.sources.rows.RowProposers`), its own request trie, one shared memory."""
        return SuffixProposer(self.max_depth, self.max_nodes, self.spec_factor, self.min_prob, self.max_match, self.memory,
                              self.vocab_size, self.merge_matches)

    def begin(self, prompt: Sequence[int]) -> None:
        """A new request: a trie of the prompt, and a new record in the memory for its output."""
        self.trie = SuffixTrie(self.trie.depth)
        self.ends = self.trie.extend(prompt)
        self.key = None if self.memory is None else self.memory.open()

    def budget(self, length: int) -> int:
        """The most draft nodes a pattern of `length` tokens earns: alpha * L, rounded down, at most ``max_nodes``."""
        return min(self.max_nodes, int(self.spec_factor * length + 1e-9))

    def draft(self, trie: SuffixTrie, context: Sequence[int]) -> SuffixDraft:
        """The best-scoring tree continuing `context` in one trie, over every pattern length (a tie: the longer pattern).

        A longer pattern is more specific and earns more nodes, but it occurred less often and
        less far back (in a repetitive text its earlier occurrences end close to the present), so
        each length grows its own tree and the one expecting the most accepted tokens wins.
        """
        best = SuffixDraft()
        for length, node in trie.matches(context, self.max_match):
            budget = self.budget(length)
            if budget >= 1:
                tokens, parents, score = grow(node, budget, self.max_depth, self.min_prob)
                if tokens and score >= best.score:
                    best = SuffixDraft(tuple(tokens), tuple(parents), score, length)
        return best

    def merged(self, tries: Sequence[SuffixTrie], context: Sequence[int]) -> SuffixDraft:
        """One tree grown from every pattern continuing `context` in `tries`, at most alpha * (the longest L) nodes."""
        matches = [match for trie in tries for match in trie.matches(context, self.max_match)]
        longest = max((length for length, _ in matches), default=0)
        budget = self.budget(longest)
        if budget < 1:
            return SuffixDraft()
        tokens, parents, score = grow([node for _, node in matches], budget, self.max_depth, self.min_prob)
        return SuffixDraft(tuple(tokens), tuple(parents), score, longest)

    def propose(self, context: Sequence[int]) -> DraftTree:
        """The higher-scoring of the request's draft and the memory's (the request's on a tie), or
        with ``merge_matches`` the one tree of every match in both."""
        if self.merge_matches:
            with nullcontext() if self.memory is None else self.memory.lock:
                best = self.merged([self.trie] + ([] if self.memory is None else [self.memory.trie]), context)
        else:
            drafts = [self.draft(self.trie, context)]
            if self.memory is not None:
                with self.memory.lock:
                    drafts.append(self.draft(self.memory.trie, context))
            best = max(drafts, key=lambda d: d.score)
        self.evidence = best.match if best.tokens else 0
        if not best.tokens:
            return DraftTree.empty()
        return DraftTree(torch.tensor(best.tokens, dtype=torch.long), torch.tensor(best.parents, dtype=torch.long),
                         (self.name,) * len(best.tokens))

    def learn(self, outcome: StepOutcome) -> None:
        """The committed tokens join the request's trie and its record in the memory."""
        self.ends = self.trie.extend(outcome.tokens, self.ends)
        if self.memory is not None:
            self.memory.record(self.key, outcome.tokens)
