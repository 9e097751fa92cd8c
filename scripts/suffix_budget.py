"""Suffix decoding's S at larger draft budgets, beside warm Token Recycling, requests in order.

Does suffix decoding with its memory reach warm Token Recycling's S (80-node trees) when it may
draft as many nodes? The requests of a multi-request workload (`ladref.bench.multi`) are decoded
in order by greedy, warm Token Recycling and `SuffixProposer`s with a `SuffixMemory` each, at
several budgets: (max_nodes, spec_factor, max_depth, min_prob). Prints each row's S over all
requests and from request 10 on, and whether every output equals greedy's. S counts tokens per
forward pass, not time: it does not depend on the machine's load, so this runs at one thread.

    python scripts/suffix_budget.py humaneval 24 > benchmarks/archive/multi/suffix_budget_humaneval.log

With ``--merged`` the suffix rows are `MERGED`'s: the default budget, then proposers that grow one
tree from every matched pattern (``merge_matches=True``) at large budgets:

    python scripts/suffix_budget.py humaneval 24 --merged > benchmarks/archive/multi/suffix_merged_humaneval.log
"""
import json
import sys
import time

import torch

from ladref import load_default_model
from ladref.bench.multi import MultiRow, TimedSuffix, conversations, run_multi
from ladref.bench.multi_report import summarize_multi
from ladref.decoders.greedy import greedy_decode
from ladref.sources.recycling import RecyclingProposer
from ladref.decoders.methods import recycling_decode
from ladref.decoders.methods import suffix_decode
from ladref.sources.suffix_trie import SuffixMemory

BUDGETS = [(16, 1.0, 12, 0.1, False), (32, 2.0, 12, 0.1, False), (80, 4.0, 16, 0.1, False), (80, 8.0, 24, 0.1, False),
           (80, 8.0, 24, 0.02, False)]
"""(max_nodes, spec_factor, max_depth, min_prob, merge_matches): the first is `SuffixProposer`'s default."""
MERGED = [(16, 1.0, 12, 0.1, False), (48, 48.0, 24, 0.02, True), (80, 16.0, 24, 0.02, True), (80, 80.0, 24, 0.02, True)]
"""The rows of ``--merged``: the default, then one merged tree at 48 and 80 nodes (alpha 48, 80: every match drafts the whole budget)."""


def main() -> None:
    workload, limit, budgets = sys.argv[1], int(sys.argv[2]), MERGED if "--merged" in sys.argv[3:] else BUDGETS
    torch.set_num_threads(1)
    model, tokenizer = load_default_model("cpu", torch.float32)
    rows = [MultiRow("greedy", lambda ids, n: greedy_decode(model, ids, n))]
    warm = RecyclingProposer.for_model(model, warm=True)
    rows.append(MultiRow("recycling_warm (80 nodes)", lambda ids, n: recycling_decode(model, ids, n, proposer=warm)))
    for nodes, factor, depth, prob, merge in budgets:
        suffix = TimedSuffix.for_model(model, memory=SuffixMemory(8192), max_nodes=nodes, spec_factor=factor,
                                       max_depth=depth, min_prob=prob, merge_matches=merge)
        run = lambda ids, n, p=suffix: suffix_decode(model, ids, n, proposer=p)  # noqa: E731
        rows.append(MultiRow(f"suffix_memory (max_nodes {nodes}, spec_factor {factor:g}, max_depth {depth}, "
                             f"min_prob {prob:g}{', merged' if merge else ''})", run, suffix))
    print(f"# {workload}, {limit} conversations, 96 new tokens per request, float32 SmolLM2-135M, 1 thread", flush=True)
    start = time.perf_counter()
    records = run_multi(tokenizer, conversations(workload, limit), rows, 96)
    print(f"# {len(records) // len(rows)} requests, {time.perf_counter() - start:.0f} s")
    print("| row | S | S from request 10 on | = greedy |\n|---|---|---|---|")
    for row in summarize_multi(records):
        print(f"| {row['method']} | {row['S']:.2f} | {row['S_later']:.2f} | {row['matches']}/{row['requests']} |")
    print(json.dumps(summarize_multi(records)))


if __name__ == "__main__":
    main()
