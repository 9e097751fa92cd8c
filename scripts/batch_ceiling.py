"""How much can a batch of greedy rows gain on this machine? transformers' own forward, then ladref's batch.

A batch pays when B rows' step costs less than B steps of one row. This measures the ceiling
that the model's own forward pass sets, before any of ladref's work: transformers' forward of
(B, 1) new tokens over a (B, past) `DynamicCache`, for B = 1, 2, 4, 8, 16 (its time over
B = 1's is what a step of B rows costs), past 200 and 800 (a batch's cache is padded to its
longest row), and beside it the same pass as ladref runs it (`ladref.head.forward_logits`: from
two rows on, the output head computed as W @ h^T). Then ladref's batched greedy on 8 Spec-Bench prompts
(the first of each task, then the second of two tasks: 10-759 tokens) against the same prompts
one at a time, whole and without the prompts' prefill (which a batch runs row by row).

    python scripts/batch_ceiling.py > benchmarks/archive/load/batch_ceiling_cpu.log
"""
import time

import torch

from ladref import greedy_decode, load_default_model
from ladref.bench.datasets import load_prompts
from ladref.facts import ModelFacts
from ladref.head import forward_logits
from ladref.hf_internals import cache_arg

THREADS, PASTS, NEW = 2, (200, 800), 48


@torch.inference_mode()
def forward_ms(model: torch.nn.Module, rows: int, past: int, facts: ModelFacts | None = None, reps: int = 10) -> float:
    """A forward of (rows, 1) tokens after (rows, past) cached ones: ms, mean of `reps`; transformers'
    own, or ladref's (`forward_logits`) given the model's `facts`."""
    from transformers import DynamicCache

    cache, name = DynamicCache(config=model.config), cache_arg(model)  # its name read once, outside the timing
    model(input_ids=torch.randint(0, 1000, (rows, past)), **{name: cache}, use_cache=True)
    start = time.perf_counter()
    for _ in range(reps):
        inputs = {"input_ids": torch.randint(0, 1000, (rows, 1)), name: cache, "use_cache": True}
        model(**inputs) if facts is None else forward_logits(model, facts, inputs, None)
    return 1e3 * (time.perf_counter() - start) / reps


def main() -> None:
    torch.set_num_threads(THREADS)
    model, tokenizer = load_default_model("cpu", torch.float32)
    print(f"# cpu float32 SmolLM2-135M, {THREADS} threads, eager transformers forward", flush=True)
    print("| B | cached | transformers forward of (B, 1), ms | x B = 1 | rows per B = 1 step | ladref's pass, ms | x B = 1 "
          "| rows per B = 1 step |\n|---|---|---|---|---|---|---|---|")
    facts = ModelFacts.of(model)
    for past in PASTS:
        base = own_base = None
        for rows in (1, 2, 4, 8, 16):
            ms, own = forward_ms(model, rows, past), forward_ms(model, rows, past, facts)
            base, own_base = base or ms, own_base or own
            print(f"| {rows} | {past} | {ms:.1f} | {ms / base:.2f} | {rows * base / ms:.2f} | {own:.1f} | {own / own_base:.2f} "
                  f"| {rows * own_base / own:.2f} |", flush=True)
    prompts = [tokenizer(p.text, return_tensors="pt").input_ids[0] for p in load_prompts("specbench", 8)[::6]]
    print(f"\nladref greedy_decode, {len(prompts)} prompts of {[len(p) for p in prompts]} tokens, {NEW} new tokens each")
    start = time.perf_counter()
    [greedy_decode(model, p, 1) for p in prompts]
    one_prefill = time.perf_counter() - start
    start = time.perf_counter()
    [greedy_decode(model, p, NEW) for p in prompts]
    one = time.perf_counter() - start
    start = time.perf_counter()
    greedy_decode(model, prompts, 1)
    batch_prefill = time.perf_counter() - start
    start = time.perf_counter()
    greedy_decode(model, prompts, NEW)
    batch = time.perf_counter() - start
    tokens, decoded = len(prompts) * NEW, len(prompts) * (NEW - 1)
    print(f"| | one at a time | one batch (B = {len(prompts)}) | batch / one at a time |\n|---|---|---|---|")
    print(f"| whole, tokens/s | {tokens / one:.1f} | {tokens / batch:.1f} | {one / batch:.2f}x |")
    print(f"| the prompts' prefill (one token each), s | {one_prefill:.2f} | {batch_prefill:.2f} | |")
    print(f"| after the prefill, tokens/s | {decoded / (one - one_prefill):.1f} | {decoded / (batch - batch_prefill):.1f} | "
          f"{(one - one_prefill) / (batch - batch_prefill):.2f}x |")


if __name__ == "__main__":
    main()
