"""The suffix trie of suffix decoding (`ladref.sources.suffix`), and its memory across requests.

A `SuffixTrie` holds every substring of its texts up to a depth D, each node counting how often
its string occurred: the node of a pattern has one child per token that ever followed it, with
how often. It grows one token at a time in O(D) (the text's last D - 1 suffixes are kept open and
each is extended), and a text can be taken out again (the same walk, counting down), which is
what lets a `SuffixMemory` evict its oldest requests. `grow` reads a draft tree off a node, best
first by those counts.

A suffix tree proper (Ukkonen; ArcticInference's C++ one) compresses the trie's unbranched chains
into edges, O(n) nodes for a text of n tokens; this trie keeps one node per token and depth,
O(n D), in exchange for code a student can read in one sitting.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import threading
from collections.abc import Sequence

from ..config import check_int


class Node:
    """A trie node: how often its string occurred, and the nodes of its one-token extensions."""

    __slots__ = ("count", "children")

    def __init__(self) -> None:
        self.count, self.children = 0, {}


class SuffixTrie:
    """Every substring of at most `depth` tokens of the texts added, counted (a suffix trie cut at `depth`).

    A text grows one token at a time: its `ends` are the nodes of its last suffixes (lengths 1 to
    depth - 1, shortest first), and appending token t extends each of them, and the empty suffix
    (the root), by t: O(depth) per token. Removing a text replays it, counting down.

    Args:
        depth: D, the longest substring kept.

    Attributes:
        root: the empty string's node; nodes: how many nodes the trie holds.
    """

    def __init__(self, depth: int) -> None:
        check_int("depth", depth, 2)
        self.depth, self.root, self.nodes = depth, Node(), 0

    def extend(self, tokens: Sequence[int], ends: Sequence[Node] = ()) -> list[Node]:
        """Append `tokens` to the text whose suffixes end at `ends` (none: a new text); its new ends."""
        ends = list(ends)
        for token in map(int, tokens):
            grown = []
            for node in [self.root, *ends]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = Node()
                    self.nodes += 1
                child.count += 1
                grown.append(child)
            ends = grown[: self.depth - 1]
        return ends

    def remove(self, tokens: Sequence[int]) -> None:
        """Take a whole text out again (it must have been added): counts down, drops nodes that reach 0."""
        ends: list[Node] = []
        for token in map(int, tokens):
            grown = []
            for node in [self.root, *ends]:
                child = node.children[token]
                child.count -= 1
                if child.count == 0:
                    del node.children[token]
                    self.nodes -= 1
                grown.append(child)
            ends = grown[: self.depth - 1]

    def find(self, pattern: Sequence[int]) -> Node | None:
        """The node of `pattern`, or None when it never occurred (or is longer than the depth)."""
        node = self.root
        for token in pattern:
            node = node.children.get(int(token))
            if node is None:
                return None
        return node

    def matches(self, context: Sequence[int], longest: int) -> list[tuple[int, Node]]:
        """Every suffix of `context` (at most `longest` tokens) that something followed: (its length L, its node), shortest first.

        A suffix that was followed by a token has shorter suffixes that were too, so the search
        stops at the first length that fails. Empty when nothing ever followed the last token.
        """
        found = []
        for n in range(1, min(longest, len(context), self.depth - 1) + 1):
            node = self.find(context[-n:])
            if node is None or not node.children:
                break
            found.append((n, node))
        return found


def grow(starts: Node | Sequence[Node], budget: int, max_depth: int, min_prob: float) -> tuple[list[int], list[int], float]:
    """The `budget` most probable nodes below `starts`, best first, at most `max_depth` deep.

    A child's probability is its parent's times the share of the parent's occurrences that went on
    with the child's token (its count over the parent's count: an occurrence that ends a text, as
    the present one does, went on with nothing, so one earlier occurrence gives 1/2, k give k/(k+1),
    as ArcticInference estimates); children below `min_prob` are not drafted. A child is never more
    probable than its parent, so the nodes taken form a tree.

    Several starts (the nodes of several matched patterns, in one trie or several) grow ONE tree:
    a token path drafted from two of them is drafted once, at the higher of their probabilities,
    and its children come from both. With one start this is the best-first tree of that node.

    Returns:
        tokens, parents (indices into tokens, -1: the root), score (the sum of their probabilities).
    """
    tokens: list[int] = []
    parents: list[int] = []
    drafted: dict[tuple[int, int], int] = {}  # (parent index, token) -> the node's index
    score, order, heap = 0.0, itertools.count(), []

    def push(parent: Node, prob: float, index: int, depth: int) -> None:
        if depth < max_depth:
            for token, child in parent.children.items():
                if prob * child.count / parent.count >= min_prob:
                    heapq.heappush(heap, (-prob * child.count / parent.count, next(order), token, child, index, depth + 1))

    for start in [starts] if isinstance(starts, Node) else starts:
        push(start, 1.0, -1, 0)
    while heap and len(tokens) < budget:
        neg, _, token, child, parent, depth = heapq.heappop(heap)
        index = drafted.get((parent, token))
        if index is None:  # a new path: drafted at this, its highest, probability
            index = drafted[parent, token] = len(tokens)
            tokens.append(token)
            parents.append(parent)
            score -= neg
        push(child, -neg, index, depth)  # a path drafted before: this start's continuations join it
    return tokens, parents, score


class SuffixMemory:
    """The outputs of earlier requests in one suffix trie, shared by every proposer given it.

    Each request's output is a record, written as its tokens are committed (a running request's
    output is drafted from at once, by every request sharing the memory). Past `max_tokens`
    tokens in all, the oldest records are evicted; a record alone keeps at most `max_tokens`.
    One lock guards the trie: proposers in threads of their own may share a memory.

    Args:
        max_tokens: the bound, in tokens, on the outputs kept.
        depth: D of the trie (a proposer needing deeper matches drafts less deep from the memory).

    Attributes:
        trie: the `SuffixTrie` of every kept output; lock: held while it is read or changed.
        vocab_size: the vocabulary its tokens come from, once a model was bound to it (`bind`).
    """

    def __init__(self, max_tokens: int = 8192, depth: int = 24) -> None:
        check_int("max_tokens", max_tokens, 1)
        self.max_tokens, self.trie, self.lock = max_tokens, SuffixTrie(depth), threading.Lock()
        self.records: dict[int, tuple[list[int], list[Node]]] = {}  # key -> (tokens, ends), oldest first
        self.tokens, self.vocab_size, self._keys = 0, None, itertools.count()

    def __deepcopy__(self, memo: dict) -> "SuffixMemory":
        """An independent memory holding the same records (a lock of its own; its nodes copied once,
        so each record's ends stay nodes of its trie)."""
        twin = SuffixMemory(self.max_tokens, self.trie.depth)
        with self.lock:
            twin.trie, twin.records = copy.deepcopy((self.trie, self.records), memo)
            twin.tokens, twin.vocab_size, twin._keys = self.tokens, self.vocab_size, itertools.count(next(self._keys))
        return twin

    def bind(self, vocab_size: int) -> None:
        """Record the vocabulary of the model it serves; another one is refused (its token ids mean other words).

        Raises:
            ValueError: the memory holds tokens of a model with another vocabulary size.
        """
        check_int("vocab_size", vocab_size, 1)
        with self.lock:
            if self.vocab_size is not None and self.vocab_size != vocab_size:
                raise ValueError(f"this SuffixMemory holds tokens of a vocabulary of {self.vocab_size} ids, the model's has "
                                 f"{vocab_size}: a memory cannot be shared between models with different vocabularies")
            self.vocab_size = vocab_size

    def open(self) -> int:
        """A new, empty record for a request's output; its key."""
        with self.lock:
            key = next(self._keys)
            self.records[key] = ([], [])
            return key

    def corpus(self, width: int) -> list[int]:
        """The kept outputs as one text: oldest first, each followed by -1 (a separator no n-gram
        spans), cut to its last `width` places (prompt lookup's memory: `ladref.PromptLookupProposer`)."""
        check_int("width", width, 1)
        with self.lock:
            places = [t for text, _ in self.records.values() for t in (*text, -1)]
        return places[-width:]

    def record(self, key: int, tokens: Sequence[int]) -> None:
        """Append `tokens` to record `key` (nothing if it was evicted), evicting the oldest others past the bound."""
        with self.lock:
            if key not in self.records:
                return
            text, ends = self.records[key]
            tokens = [int(t) for t in tokens][: self.max_tokens - len(text)]
            while self.tokens + len(tokens) > self.max_tokens:  # only `key` left: it fits, cut to the bound above
                evicted, _ = self.records.pop(next(k for k in self.records if k != key))
                self.trie.remove(evicted)
                self.tokens -= len(evicted)
            text += tokens
            self.records[key] = (text, self.trie.extend(tokens, ends))
            self.tokens += len(tokens)
