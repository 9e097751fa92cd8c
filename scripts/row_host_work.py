"""The host work of one row's step, its forward pass free: greedy, `chain` and `adaptive` as rows of a busy batch.

A row of a batch does its host work (laying out a step, pricing it, verifying, committing,
learning) between the batch's passes, one row after another. This script times that work alone:
each loop runs over a runner whose forward returns stored random logits at once, posing as a row
of a batch of B rows whose other rows feed one token a step (so `adaptive` and `chain`, priced on
the surface at B, draft nothing, as they do in a busy batch). Milliseconds per step, median of
`--rounds` loops of 300 steps each, the methods in turns.

    python scripts/row_host_work.py --surface benchmarks/results/load/threads_linears_b16/load_surface_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ladref import load_default_model
from ladref.batch import RowRunner
from ladref.bench.engines import Chain, ChainController
from ladref.call import TokenSink
from ladref.fast.adaptive import PolicyChoice, default_proposers
from ladref.fast.policy import DraftPolicy, PolicySettings
from ladref.fast.surface import CostSurface
from ladref.greedy import run_greedy
from ladref.results import DecodeStats
from ladref.runner import Runner
from ladref.sources.prompt_lookup import PromptLookupProposer
from ladref.step import run_drafting


class Other:
    """Another row of the batch: one token a step, a greedy step's width."""

    tokens, own_width = 1.0, 1


class FreeRow(RowRunner):
    """A row of a batch of `rows` whose forward costs nothing: stored random (k, V) logits."""

    def __init__(self, model: torch.nn.Module, rows: int) -> None:
        Runner.__init__(self, model)
        self.own_width, self.tokens, self.length, self.pending = 1, 1.0, 0, None
        self.batch = type("Batch", (), {"live": [self] + [Other() for _ in range(rows - 1)], "done": set()})()
        self.bank, self.draw = torch.randn(64, self.vocab_size), torch.Generator().manual_seed(0)

    def prefill(self, prompt: torch.Tensor, stats: DecodeStats, **_: object) -> int:
        self.length, stats.prefill_tokens = prompt.shape[0] - 1, prompt.shape[0] - 1
        return int(prompt[-1])

    def prefill_whole(self, prompt: torch.Tensor, stats: DecodeStats) -> torch.Tensor:
        self.length, stats.prefill_tokens = prompt.shape[0], prompt.shape[0] - 1
        return self.bank[0]

    def forward(self, input_ids, position_ids=None, allowed=None, keep=None) -> torch.Tensor:
        q = input_ids.shape[0]
        self.length += q
        start = int(torch.randint(0, 64 - q, (1,), generator=self.draw))
        return self.bank[start : start + (q if keep is None else len(keep))]

    def commit(self, past_len: int, accepted: torch.Tensor) -> None:
        self.length = past_len + len(accepted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--surface", required=True, help="a CostSurface JSON file")
    parser.add_argument("--batch", type=int, default=8, help="B, the batch the row prices its steps in")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as a row's thread runs (`ladref.rows.row_threads`)
    model, _ = load_default_model(device="cpu")
    surface, prompt, steps = CostSurface.load(args.surface), torch.randint(0, 49152, (500,)), 300

    def loop(name: str) -> float:
        row, stats, sink = FreeRow(model, args.batch), DecodeStats(), TokenSink(steps, frozenset())
        began = time.perf_counter()
        if name == "greedy":
            run_greedy(row, prompt, sink, stats)
        elif name == "chain":
            run_drafting(row, prompt, [PromptLookupProposer(4)], sink, stats, None, 8192, Chain(row, ChainController(surface, 4)))
        else:
            policy = DraftPolicy(surface.at(args.batch), None, PolicySettings(calibrate=False))
            run_drafting(row, prompt, default_proposers(model), sink, stats, None, 8192, PolicyChoice(policy, surface, row))
        assert stats.steps == steps and max(stats.forward_tokens_per_step[1:]) == 1  # no drafts after the first step
        return (time.perf_counter() - began) / steps * 1e3

    times: dict[str, list[float]] = {"greedy": [], "chain": [], "adaptive": []}
    for r in range(args.rounds):
        for name in (list(times) if r % 2 == 0 else list(times)[::-1]):
            times[name].append(loop(name))
    print(f"host work of a row's step, B = {args.batch}, forward free, {steps} steps, median of {args.rounds} loops:")
    for name, ms in times.items():
        print(f"  {name:9s} {statistics.median(ms):.3f} ms  ({', '.join(f'{m:.3f}' for m in ms)})")


if __name__ == "__main__":
    main()
