"""A/B in one process, the sides in turns: `adaptive` and batched greedy at B = 1 and 2 over 12
Spec-Bench prompts (2 per task, 64 new tokens) with the linear layers of passes of 6 to 8 rows as
W @ x^T (`SMALL_ROWS` 1-8, new) or as ``F.linear`` (1-5, old). Each side prices its steps on a
surface measured under it (B = 1, 2; KV 128, 512). It rebinds ``ladref.kernels.SMALL_ROWS`` before
every call; the library has no switch. Its log: wide_rows_decoders.log.

    python benchmarks/results/step_breakdown/wide_rows/wide_rows_decoders.py > benchmarks/results/step_breakdown/wide_rows/wide_rows_decoders.log
"""
import time

import torch

torch.set_num_threads(2)
import ladref.kernels as kernels
from ladref import greedy_decode, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.adaptive import AdaptiveDecoder
from ladref.fast.surface import CostSurface

SIDES = {"old": range(1, 6), "new": range(1, 9)}
NEW, ROUNDS = 64, 3


def main() -> None:
    model, tok = load_default_model("cpu", torch.float32)
    prompts, eos = encode_prompts(tok, load_prompts("specbench", 2)), [tok.eos_token_id]
    print(f"# {len(prompts)} Spec-Bench prompts, {NEW} new tokens, torch {torch.__version__}, 2 threads, float32 SmolLM2-135M",
          flush=True)
    decoders, first = {}, {}
    for side, rows in SIDES.items():
        kernels.SMALL_ROWS = rows
        start = time.perf_counter()
        surface = CostSurface.measure(model, batches=(1, 2), kv_lengths=(128, 512))
        decoders[side] = AdaptiveDecoder(model, cost=surface)
        print(f"# {side}: surface measured in {time.perf_counter() - start:.0f} s; t(q)/t(1) at B = 1, KV 512, q = 4, 6, 8: "
              + ", ".join(f"{surface.relative(q, 512, 1):.2f}" for q in (4, 6, 8))
              + "; at B = 2, q = 2, 3, 4: " + ", ".join(f"{surface.relative(q, 512, 2):.2f}" for q in (2, 3, 4)), flush=True)
    totals: dict[tuple[str, str], list[float]] = {}
    for rnd in range(ROUNDS):
        for side in (tuple(SIDES) if rnd % 2 else tuple(SIDES)[::-1]):
            kernels.SMALL_ROWS = SIDES[side]
            for name, batch in (("greedy", 1), ("adaptive", 1), ("greedy", 2), ("adaptive", 2)):
                start, outs = time.perf_counter(), []
                for s in range(0, len(prompts), batch):
                    chunk = prompts[s] if batch == 1 else prompts[s:s + batch]
                    out = (greedy_decode(model, chunk, NEW, eos_token_id=eos) if name == "greedy"
                           else decoders[side](chunk, NEW, eos_token_id=eos))
                    outs += [out.token_ids] if batch == 1 else list(out.token_ids)
                seconds = time.perf_counter() - start
                tokens = sum(len(t) for t in outs)
                equal = outs == first.setdefault("greedy", outs)
                totals.setdefault((f"{name} B={batch}", side), []).append(tokens / seconds)
                print(f"round {rnd} {side} {name:8s} B={batch}  {seconds:6.1f} s  {tokens / seconds:5.1f} tok/s  "
                      f"equal to the first greedy run: {equal}", flush=True)
    print("\nmean tokens/s over the rounds, new / old:")
    for key in ("greedy B=1", "adaptive B=1", "greedy B=2", "adaptive B=2"):
        old, new = (sum(totals[(key, s)]) / ROUNDS for s in ("old", "new"))
        print(f"  {key:13s} old {old:5.1f}  new {new:5.1f}  new/old {new / old:.2f}")
    for side in SIDES:
        for b in (1, 2):
            ratio = (sum(totals[(f"adaptive B={b}", side)]) / sum(totals[(f"greedy B={b}", side)]))
            print(f"  {side}: adaptive x greedy at B = {b}: {ratio:.2f}")


if __name__ == "__main__":
    main()
