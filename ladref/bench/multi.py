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

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..config import LookaheadConfig
from ..fast.adaptive import AdaptiveDecoder, remembering_proposers
from ..fast.cost import CostModel
from ..greedy import greedy_decode
from ..results import DecodeResult
from ..sources.lookahead import lookahead_decode
from ..sources.prompt_lookup import prompt_lookup_decode
from ..sources.recycling import RecyclingProposer, recycling_decode
from ..sources.suffix import SuffixProposer, suffix_decode
from ..sources.suffix_trie import SuffixMemory
from .datasets import SPECBENCH_FILE, load_prompts, read_jsonl, specbench_task
from .figures import panels, save
from .methods import one_of

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
    `lookup_memory` its prompt lookup's memory, if any."""

    label: str
    run: Callable[[torch.Tensor, int], DecodeResult]
    suffix: TimedSuffix | None = None
    lookup_memory: SuffixMemory | None = None

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
            rows.append(MultiRow(method, run, suffix))
        elif method == "recycling_warm":
            warm = RecyclingProposer.for_model(model, warm=True)
            rows.append(MultiRow(method, lambda ids, n: recycling_decode(model, ids, n, proposer=warm, attention_backend=backend)))
        elif method in ("prompt_lookup", "prompt_lookup_memory"):
            memory = SuffixMemory(memory_tokens) if method == "prompt_lookup_memory" else None
            run = lambda ids, n, m=memory: prompt_lookup_decode(model, ids, n, draft_len=lookup_tokens, memory=m,  # noqa: E731
                                                                attention_backend=backend)
            rows.append(MultiRow(method, run, lookup_memory=memory))
        elif method == "lookahead":
            rows.append(MultiRow(method, lambda ids, n: lookahead_decode(model, ids, n, config=config, attention_backend=backend)))
        else:  # adaptive_all: every source, each keeping what it can across requests, and the learned acceptance
            suffix = TimedSuffix.for_model(model, memory=SuffixMemory(memory_tokens))
            decoder = AdaptiveDecoder(model, cost=cost, proposers=remembering_proposers(model, suffix), keep_learning=True,
                                      attention_backend=backend)
            rows.append(MultiRow(method, lambda ids, n: decoder(ids, n), suffix))
    return rows


@dataclass(frozen=True)
class RequestRecord:
    """One row on one request.

    Attributes:
        index: the request's place in the sequence, 0 first; request_id: "<conversation id>/<turn>".
        method: the row; prompt_tokens: L; new_tokens, steps, compression (S), wall_s: as `ladref.DecodeStats`.
        match: output identical to greedy's on this request.
        host_s: seconds its suffix proposer spent in propose and learn (0: no suffix proposer).
        memory_tokens, memory_nodes: its memory's tokens and trie nodes after the request (0: none).
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


def run_request(rows: Sequence[MultiRow], ids: torch.Tensor, index: int, request_id: str,
                max_new_tokens: int) -> tuple[list[int], list[RequestRecord]]:
    """Every row on one request (their order rotated with the index); greedy's tokens and the records, in row order."""
    shift, done = index % len(rows), {}
    for row in rows[shift:] + rows[:shift]:
        before = row.host_s
        done[row.label] = (row.run(ids, max_new_tokens), row.host_s - before, row.memory_size)
    greedy = done["greedy"][0].token_ids
    records = []
    for row in rows:
        result, host, (tokens, nodes) = done[row.label]
        s = result.stats
        records.append(RequestRecord(index, request_id, row.label, s.prefill_tokens + 1, s.new_tokens, s.steps, s.compression,
                                     s.wall_time_s, result.token_ids == greedy, host, tokens, nodes))
    return greedy, records


def run_multi(tokenizer: object, chats: Sequence[Conversation], rows: Sequence[MultiRow], max_new_tokens: int,
              on_request: Callable[[int], None] | None = None) -> list[RequestRecord]:
    """Decode the conversations' requests in order with every row; the second turn of a chat follows greedy's first answer.

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
                                       max_new_tokens)
            records += done
            messages.append({"role": "assistant", "content": tokenizer.decode(greedy, skip_special_tokens=True)})
            if on_request is not None:
                on_request(index)
    return records


def pooled(records: Sequence[RequestRecord]) -> tuple[float, float]:
    """S and tokens/s pooled over `records`: total tokens / total steps, total tokens / total seconds."""
    tokens = sum(r.new_tokens for r in records)
    return tokens / sum(r.steps for r in records), tokens / sum(r.wall_s for r in records)


def summarize_multi(records: Sequence[RequestRecord], later: int = LATER) -> list[dict]:
    """Per row: S and tokens/s over all requests and from request `later` on, speedup over greedy, matches,
    the suffix proposer's host time per step (ms, and its share of the wall time) and the final memory size."""
    greedy_s = sum(r.wall_s for r in records if r.method == "greedy")
    rows = []
    for method in dict.fromkeys(r.method for r in records):
        mine = [r for r in records if r.method == method]
        (s, speed), (s_later, speed_later) = pooled(mine), pooled([r for r in mine if r.index >= later - 1] or mine)
        wall, host, steps = sum(r.wall_s for r in mine), sum(r.host_s for r in mine), sum(r.steps for r in mine)
        rows.append({"method": method, "requests": len(mine), "S": s, "S_later": s_later, "tokens_per_s": speed,
                     "tokens_per_s_later": speed_later, "speedup": greedy_s / wall, "matches": sum(r.match for r in mine),
                     "host_ms_per_step": 1e3 * host / steps, "host_share": host / wall,
                     "memory_tokens": mine[-1].memory_tokens, "memory_nodes": mine[-1].memory_nodes})
    return rows


def multi_markdown(summary: Sequence[dict], records: Sequence[RequestRecord], later: int = LATER, block: int = 10) -> str:
    """The summary table, then S per block of `block` requests (does it grow as the memories fill?)."""
    lines = [f"| method | S | S from request {later} on | tok/s | tok/s from request {later} on | x greedy | = greedy | "
             "host ms/step | host share | memory tokens | memory nodes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['method']} | {s['S']:.2f} | {s['S_later']:.2f} | {s['tokens_per_s']:.1f} | {s['tokens_per_s_later']:.1f} | "
                     f"{s['speedup']:.2f} | {s['matches']}/{s['requests']} | {s['host_ms_per_step']:.2f} | "
                     f"{100 * s['host_share']:.1f}% | {s['memory_tokens']} | {s['memory_nodes']} |")
    count = 1 + max(r.index for r in records)
    blocks = [(start, min(start + block, count)) for start in range(0, count, block)]
    lines += ["", "| method | " + " | ".join(f"S, requests {a + 1}-{b}" for a, b in blocks) + " |", "|---" * (len(blocks) + 1) + "|"]
    for method in dict.fromkeys(r.method for r in records):
        cells = []
        for a, b in blocks:
            cells.append(f"{pooled([r for r in records if r.method == method and a <= r.index < b])[0]:.2f}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_multi(records: Sequence[RequestRecord], path: str | Path, title: str, window: int = 5) -> Path:
    """S (left) and tokens/s (right) against the request's index, a trailing mean over `window` requests, one line per row."""
    fig, ax_s, ax_v = panels(size=(11, 4.2))
    for method in dict.fromkeys(r.method for r in records):
        mine = sorted((r for r in records if r.method == method), key=lambda r: r.index)
        for ax, value in ((ax_s, lambda r: r.compression), (ax_v, lambda r: r.new_tokens / r.wall_s)):
            values = [value(r) for r in mine]
            smooth = [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]
            ax.plot([r.index + 1 for r in mine], smooth, label=method, lw=1.5)
    for ax, label in ((ax_s, "S, tokens per step"), (ax_v, "tokens/s")):
        ax.set_xlabel(f"request (in order; trailing mean of {window})")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    ax_s.legend(fontsize=7)
    return save(fig, path, title)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the multi-request options of the bench command."""
    add = parser.add_argument
    add("--multi-request", choices=WORKLOADS, default=None, help="decode a workload's requests one after another, each "
        "row keeping its memory across them (ladref.bench.multi): mtbench (two-turn chats) or humaneval; --limit "
        "counts conversations; rows from " + ", ".join(MULTI_METHODS) + " (--method picks some)")
    add("--memory-tokens", type=int, default=8192, help="--multi-request: the memories' bound, in tokens (default 8192)")


def run_multi_command(model: torch.nn.Module, tokenizer: object, methods: Sequence[str], args: argparse.Namespace, meta: dict) -> int:
    """Run the workload, print the tables and save JSON, markdown and the figure to ``--out`` (the figure: ``--figure``)."""
    chats = conversations(args.multi_request, args.limit, args.skip)
    config = args.config[0] if args.config else LookaheadConfig(args.window, args.ngram, args.candidates or args.window)
    rows = multi_rows(model, ("greedy", *methods), config, lookup_tokens=args.lookup_tokens, memory_tokens=args.memory_tokens,
                      attention_backend=args.attention_backend)
    rows[0].run(conversation_ids(tokenizer, [{"role": "user", "content": chats[0].turns[0]}]), 8)  # warm-up, greedy: no state
    total = sum(len(c.turns) for c in chats)
    progress = None if args.no_progress else lambda i: print(f"  request {i + 1}/{total}", file=sys.stderr, flush=True)
    records = run_multi(tokenizer, chats, rows, args.max_new_tokens, progress)
    summary, stem = summarize_multi(records), Path(args.out) / f"multi_{args.multi_request}_{model.device.type}"
    settings = {"workload": args.multi_request, "conversations": len(chats), "requests": total, "max_new_tokens": args.max_new_tokens,
                "lookahead": str(config), "lookup_tokens": args.lookup_tokens, "memory_tokens": args.memory_tokens}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"meta": dict(meta, settings=settings), "summary": summary,
                                                     "records": [asdict(r) for r in records]}, indent=1) + "\n")
    table = multi_markdown(summary, records)
    stem.with_suffix(".md").write_text(table + "\n")
    title = f"Requests in order ({args.multi_request}, {total} requests): SmolLM2-135M ({meta['dtype']}), {meta['machine']}"
    figure = plot_multi(records, args.figure or stem.with_suffix(".png"), title)
    print("\n" + table)
    for r in records:
        if not r.match:
            print(f"WARNING: {r.method} output differs from greedy on request {r.request_id}")
    print(f"saved {stem}.json, {stem}.md and {figure}")
    return 0
