"""``bench --multi-request``: the requests-in-order run's summary, tables, figure and command (`ladref.bench.multi`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from ..config import LookaheadConfig
from .figures import panels, save
from .measure import device_protocol
from .multi import LATER, MULTI_METHODS, WORKLOADS, RequestRecord, conversation_ids, conversations, multi_rows, run_multi
from .protocol import Protocol


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
                     "memory_tokens": mine[-1].memory_tokens, "memory_nodes": mine[-1].memory_nodes,
                     "rounds": sum(len(r.rounds_s) for r in mine), "flagged": sum(r.flagged for r in mine)})
    return rows


def multi_markdown(summary: Sequence[dict], records: Sequence[RequestRecord], later: int = LATER, block: int = 10) -> str:
    """The summary table, then S per block of `block` requests (does it grow as the memories fill?)."""
    lines = [f"| method | S | S from request {later} on | tok/s | tok/s from request {later} on | x greedy | = greedy | "
             "host ms/step | host share | memory tokens | memory nodes | rounds | flagged |", "|---" * 13 + "|"]
    for s in summary:
        lines.append(f"| {s['method']} | {s['S']:.2f} | {s['S_later']:.2f} | {s['tokens_per_s']:.1f} | {s['tokens_per_s_later']:.1f} | "
                     f"{s['speedup']:.2f} | {s['matches']}/{s['requests']} | {s['host_ms_per_step']:.2f} | "
                     f"{100 * s['host_share']:.1f}% | {s['memory_tokens']} | {s['memory_nodes']} | {s.get('rounds', '')} | "
                     f"{s.get('flagged', '')} |")
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
    records = run_multi(tokenizer, chats, rows, args.max_new_tokens, progress, device_protocol(Protocol(), model.device))
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
    flagged = sum(r.flagged for r in records)
    print(f"measurement protocol: {sum(len(r.rounds_s) for r in records)} timed calls for {len(records)} (request, method) "
          f"pairs, {flagged} flagged (never settled)")
    for r in records:
        if not r.match:
            print(f"WARNING: {r.method} output differs from greedy on request {r.request_id}")
    print(f"saved {stem}.json, {stem}.md and {figure}")
    return 0
