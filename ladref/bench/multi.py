"""``bench --multi-request mtbench|humaneval``: requests decoded one after another, each row keeping its state.

Does a memory across requests help as requests accumulate? Every row decodes the same requests
in the same order, and the rows that can remember keep what they learned from one to the next:

* ``suffix_memory``: `ladref.SuffixProposer` with a `ladref.SuffixMemory` of the earlier outputs;
* ``suffix``: the same proposer without a memory (the request's own text only);
* ``recycling_warm``: one Token Recycling matrix kept across the requests (the paper's warm start);
* ``prompt_lookup_memory``: `ladref.PromptLookupProposer` searching a `ladref.SuffixMemory` of the
  earlier outputs before each prompt (the remembering source a captured step can run);
* ``prompt_lookup`` and ``lookahead``: nothing kept across requests;
* ``adaptive_all``: adaptive decoding with every source (prompt lookup, the lookahead window and
  pool, Token Recycling kept warm, suffix with its own memory), its learned acceptance kept too.

Workloads (`WORKLOADS`): ``mtbench``, Spec-Bench's MT-bench questions as two-turn chats (the
second request holds the first turn, greedy's answer to it and the second turn), and
``humaneval``, the HumanEval prompts in order. Each output is checked against greedy's; each row
with a memory reports its size, and each suffix row the host time its proposer spent per step.

    python -m ladref bench --multi-request mtbench --limit 15 --max-new-tokens 96 --threads 2 \\
        --out benchmarks/archive/multi --figure docs/img/multi_mtbench_cpu.png
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from ..config import LookaheadConfig
from ..fast.adaptive import AdaptiveDecoder, remembering_proposers
from ..pricing.cost import CostModel
from ..decoders.greedy import greedy_decode
from ..results import DecodeResult
from ..decoders.methods import lookahead_decode
from ..decoders.methods import prompt_lookup_decode
from ..sources.recycling import RecyclingProposer
from ..decoders.methods import recycling_decode
from ..sources.suffix import SuffixProposer
from ..decoders.methods import suffix_decode
from ..sources.suffix_trie import SuffixMemory
from .datasets import SPECBENCH_FILE, load_prompts, read_jsonl, specbench_task
from .methods import one_of
from .protocol import Protocol, Sample, disturbed, figure, rounds, settled, timed
from .state import checkpoint, learned

WORKLOADS = ("mtbench", "humaneval")
MULTI_METHODS = ("greedy", "suffix_memory", "suffix", "recycling_warm", "prompt_lookup", "prompt_lookup_memory", "lookahead",
                 "adaptive_all")
LATER = 10
"""The summary's S and speed "from request LATER on" (1-based): once the memories hold something."""


def canonical_multi_method(name: str) -> str:
    """`name` if it is one of `MULTI_METHODS`. Raises ValueError naming the valid ones."""
    return one_of(name, MULTI_METHODS, "multi-request method {!r}")


@dataclass(frozen=True)
class Conversation:
    """One conversation: its user turns, each sent as a request after the earlier turns and answers.

    Attributes:
        conversation_id: the dataset's id; turns: the user messages, in order.
    """

    conversation_id: str
    turns: tuple[str, ...]


def conversations(workload: str, limit: int | None = None, skip: int = 0) -> list[Conversation]:
    """The workload's conversations in order: MT-bench's two-turn questions, or one-turn HumanEval prompts."""
    if workload == "humaneval":
        return [Conversation(p.prompt_id, (p.text,)) for p in load_prompts("humaneval", limit, skip)]
    one_of(workload, WORKLOADS, "multi-request workload {!r}")
    rows = read_jsonl(SPECBENCH_FILE, "ladref")
    chats = [Conversation(str(r["question_id"]), tuple(r["turns"])) for r in rows if specbench_task(r["category"]) == "mt_bench"]
    return chats[skip : None if limit is None else skip + limit]


def conversation_ids(tokenizer: object, messages: Sequence[dict]) -> torch.Tensor:
    """The chat's ids through the tokenizer's template, generation prompt added: (1, L) long."""
    encoded = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, return_tensors="pt")
    return (encoded if isinstance(encoded, torch.Tensor) else encoded["input_ids"]).long()


class TimedSuffix(SuffixProposer):
    """A `SuffixProposer` that adds up the host time its ``propose`` and ``learn`` take (``host_s``)."""

    host_s = 0.0

    def propose(self, context):
        start = time.perf_counter()
        tree = super().propose(context)
        self.host_s += time.perf_counter() - start
        return tree

    def learn(self, outcome):
        start = time.perf_counter()
        super().learn(outcome)
        self.host_s += time.perf_counter() - start


@dataclass
class MultiRow:
    """One row: decodes a request with the state it keeps; `suffix` is its suffix proposer, if any, and
    `lookup_memory` its prompt lookup's memory, if any; `checkpoint` (a row that learns across requests)
    saves what it has learned and returns the function that restores it (`ladref.bench.state.checkpoint`)."""

    label: str
    run: Callable[[torch.Tensor, int], DecodeResult]
    suffix: TimedSuffix | None = None
    lookup_memory: SuffixMemory | None = None
    checkpoint: Callable[[], Callable[[], None]] | None = None

    @property
    def host_s(self) -> float:
        """The host time its suffix proposer has spent so far (0: none)."""
        return 0.0 if self.suffix is None else self.suffix.host_s

    @property
    def memory_size(self) -> tuple[int, int]:
        """Its memory's (suffix decoding's or prompt lookup's) tokens and trie nodes ((0, 0): none)."""
        memory = self.lookup_memory if self.suffix is None else self.suffix.memory
        return (0, 0) if memory is None else (memory.tokens, memory.trie.nodes)


def multi_rows(model: torch.nn.Module, methods: Sequence[str], config: LookaheadConfig, *, lookup_tokens: int = 10,
               memory_tokens: int = 8192, attention_backend: str = "auto", cost: CostModel | None = None) -> list[MultiRow]:
    """The rows of `methods`, greedy first, each with its own state (`cost`: adaptive's curve; default the cost cache's)."""
    backend = attention_backend
    rows = [MultiRow("greedy", lambda ids, n: greedy_decode(model, ids, n, attention_backend=backend))]
    for method in dict.fromkeys(canonical_multi_method(m) for m in methods if m != "greedy"):
        if method in ("suffix", "suffix_memory"):
            suffix = TimedSuffix.for_model(model, memory=SuffixMemory(memory_tokens) if method == "suffix_memory" else None)
            run = lambda ids, n, p=suffix: suffix_decode(model, ids, n, proposer=p, attention_backend=backend)  # noqa: E731
            rows.append(MultiRow(method, run, suffix, checkpoint=checkpoint(*learned(suffix), shared=[model])))
        elif method == "recycling_warm":
            warm = RecyclingProposer.for_model(model, warm=True)
            rows.append(MultiRow(method, lambda ids, n: recycling_decode(model, ids, n, proposer=warm, attention_backend=backend),
                                 checkpoint=checkpoint(warm, shared=[model])))
        elif method in ("prompt_lookup", "prompt_lookup_memory"):
            memory = SuffixMemory(memory_tokens) if method == "prompt_lookup_memory" else None
            run = lambda ids, n, m=memory: prompt_lookup_decode(model, ids, n, draft_len=lookup_tokens, memory=m,  # noqa: E731
                                                                attention_backend=backend)
            rows.append(MultiRow(method, run, lookup_memory=memory, checkpoint=None if memory is None else checkpoint(memory)))
        elif method == "lookahead":
            rows.append(MultiRow(method, lambda ids, n: lookahead_decode(model, ids, n, config=config, attention_backend=backend)))
        else:  # adaptive_all: every source, each keeping what it can across requests, and the learned acceptance
            suffix = TimedSuffix.for_model(model, memory=SuffixMemory(memory_tokens))
            decoder = AdaptiveDecoder(model, cost=cost, proposers=remembering_proposers(model, suffix), keep_learning=True,
                                      attention_backend=backend)
            rows.append(MultiRow(method, lambda ids, n: decoder(ids, n), suffix, checkpoint=checkpoint(decoder, *learned(suffix), shared=[model])))
    return rows


@dataclass(frozen=True)
class RequestRecord:
    """One row on one request.

    Attributes:
        index: the request's place in the sequence, 0 first; request_id: "<conversation id>/<turn>".
        method: the row; prompt_tokens: L; new_tokens, steps, compression (S), wall_s: as `ladref.DecodeStats`.
        match: output identical to greedy's on this request, in every round.
        host_s: seconds its suffix proposer spent in propose and learn (0: no suffix proposer).
        memory_tokens, memory_nodes: its memory's tokens and trie nodes after the request (0: none).
        rounds_s, cpu_shares, loads, disturbed, flagged: the measurement protocol's rounds of this
            request (`ladref.bench.protocol`; each round of a row that learns starts from the state
            it had before the request); wall_s is the figure's round.
    """

    index: int
    request_id: str
    method: str
    prompt_tokens: int
    new_tokens: int
    steps: int
    compression: float
    wall_s: float
    match: bool
    host_s: float = 0.0
    memory_tokens: int = 0
    memory_nodes: int = 0
    rounds_s: tuple[float, ...] = ()
    cpu_shares: tuple[float, ...] = ()
    loads: tuple[float, ...] = ()
    disturbed: tuple[bool, ...] = ()
    flagged: bool = False


def run_request(rows: Sequence[MultiRow], ids: torch.Tensor, index: int, request_id: str, max_new_tokens: int,
                protocol: Protocol = Protocol()) -> tuple[list[int], list[RequestRecord]]:
    """Every row on one request in protocol rounds (their order rotated with the index), each round of a
    learning row from its state before the request; greedy's tokens and the records, in row order."""
    by_label, done = {row.label: row for row in rows}, {}
    saved = {row.label: row.checkpoint() for row in rows if row.checkpoint is not None}

    def measure(label: str) -> Sample:
        row = by_label[label]
        if label in done and label in saved:
            saved[label]()
        before = row.host_s
        result, sample = timed(lambda: row.run(ids, max_new_tokens))
        done.setdefault(label, []).append((result, row.host_s - before, row.memory_size))
        return replace(sample, steps=max(1, result.stats.steps))

    samples = rounds([row.label for row in rows], measure, protocol, shift=index % len(rows))
    greedy, records = done["greedy"][0][0].token_ids, []
    for row in rows:
        mine, chosen = samples[row.label], figure(samples[row.label], protocol)
        result, host, (tokens, nodes) = done[row.label][mine.index(chosen)]
        s, same = result.stats, all(r.token_ids == greedy for r, _, _ in done[row.label])
        records.append(RequestRecord(index, request_id, row.label, s.prefill_tokens + 1, s.new_tokens, s.steps, s.compression,
                                     chosen.wall_s, same, host, tokens, nodes, tuple(x.wall_s for x in mine),
                                     tuple(round(x.share(protocol.threads), 3) for x in mine), tuple(round(x.load, 2) for x in mine),
                                     tuple(disturbed(mine, protocol)), not settled(mine, protocol)))
    return greedy, records


def run_multi(tokenizer: object, chats: Sequence[Conversation], rows: Sequence[MultiRow], max_new_tokens: int,
              on_request: Callable[[int], None] | None = None, protocol: Protocol = Protocol()) -> list[RequestRecord]:
    """Decode the conversations' requests in order with every row, each request in the rounds of `protocol`;
    the second turn of a chat follows greedy's first answer.

    Returns:
        One `RequestRecord` per (request, row), request-major.
    """
    if not rows or rows[0].label != "greedy":
        raise ValueError("the first row must be greedy, the reference of every output")
    records: list[RequestRecord] = []
    for chat in chats:
        messages: list[dict] = []
        for turn, text in enumerate(chat.turns, 1):
            messages.append({"role": "user", "content": text})
            index = len(records) // len(rows)
            greedy, done = run_request(rows, conversation_ids(tokenizer, messages), index, f"{chat.conversation_id}/{turn}",
                                       max_new_tokens, protocol)
            records += done
            messages.append({"role": "assistant", "content": tokenizer.decode(greedy, skip_special_tokens=True)})
            if on_request is not None:
                on_request(index)
    return records
