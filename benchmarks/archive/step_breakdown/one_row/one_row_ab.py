"""A/B: one-row linear layers as torch's matrix-vector product (``F.linear``, what transformers runs)
against W @ [x; 0]^T (two columns, a matrix product: `ladref.kernels.small_row_linear`).

1. The products alone, W out of the caches (many copies of a layer's W, read in turn, as a
   forward pass reads its weights): ms and GB/s of W read.
2. One eager pass of one token over 512 cached ones (`ladref.fast.timing.measure_batch_steps`).
3. `greedy_decode` over six Spec-Bench prompts (one per task), 64 new tokens, and transformers'
   `generate` beside it: tokens/s, and whether the tokens are the same.

The two sides differ only in ``ladref.kernels.SMALL_ROWS`` (2-5 rows: before; 1-5 rows: after),
switched round by round in one process.

    python benchmarks/results/step_breakdown/one_row/one_row_ab.py > benchmarks/results/step_breakdown/one_row/one_row_ab.log
"""
import statistics
import time

import torch
import torch.nn.functional as F

from ladref import greedy_decode, kernels, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts
from ladref.fast.timing import measure_batch_steps
from ladref.runner import check_model

SIDES = {"before (F.linear)": range(2, 6), "after (W @ [x; 0]^T)": range(1, 6)}
NEW, ROUNDS = 64, 3


def products() -> None:
    print("## 1. one row's product, W out of the caches: ms for all copies, GB/s of W read (median of 20)")
    for n, k, copies in ((1536, 576, 30), (576, 1536, 30), (576, 576, 60), (49152, 576, 1)):
        x, weights = torch.randn(1, k), [torch.randn(n, k) for _ in range(copies)]
        mb = n * k * 4 * copies / 1e6
        for name, fn in (("F.linear(x, W)", lambda w: F.linear(x, w)), ("W @ [x; 0]^T", lambda w: kernels.small_row_linear(x, w))):
            times = []
            for _ in range(23):
                start = time.perf_counter()
                for w in weights:
                    fn(w)
                times.append(1e3 * (time.perf_counter() - start))
            ms = statistics.median(times[3:])
            print(f"  W {n}x{k}, {copies} copies ({mb:.0f} MB): {name:15s} {ms:6.2f} ms  {mb / ms:5.1f} GB/s", flush=True)


def main() -> None:
    torch.set_num_threads(2)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, float32 SmolLM2-135M")
    products()
    model, tokenizer = load_default_model()
    facts = check_model(model)
    prompts = [p[0] for p in encode_prompts(tokenizer, load_prompts("specbench", 1))]
    greedy_decode(model, prompts[0], 2)
    passes, speeds, tokens = {s: [] for s in SIDES}, {s: [] for s in SIDES}, {}
    for r in range(ROUNDS):
        for side in SIDES if r % 2 == 0 else list(SIDES)[::-1]:
            kernels.SMALL_ROWS = SIDES[side]
            passes[side].append(1e3 * measure_batch_steps(model, facts, 1, [1], [512], 5)[0][0])
            start, out = time.perf_counter(), [greedy_decode(model, p, NEW).token_ids for p in prompts]
            speeds[side].append(sum(map(len, out)) / (time.perf_counter() - start))
            tokens.setdefault(side, out)
            print(f"round {r} {side:22s} pass {passes[side][-1]:5.1f} ms  greedy_decode {speeds[side][-1]:5.1f} tokens/s  "
                  f"same tokens as its first round: {out == tokens[side]}", flush=True)
    kernels.SMALL_ROWS = SIDES["after (W @ [x; 0]^T)"]
    start = time.perf_counter()
    hf = [model.generate(p[None], attention_mask=torch.ones_like(p[None]), max_new_tokens=NEW, do_sample=False)[0, len(p):].tolist()
          for p in prompts]
    hf_speed = sum(map(len, hf)) / (time.perf_counter() - start)
    print("\n## 2-3. medians over the rounds")
    for side in SIDES:
        same = sum(a == b[:len(a)] for a, b in zip(tokens[side], hf))
        print(f"  {side:22s} one-token pass {statistics.median(passes[side]):5.1f} ms   greedy_decode "
              f"{statistics.median(speeds[side]):5.1f} tokens/s   prompts whose tokens equal generate's: {same}/{len(prompts)}")
    before, after = (statistics.median(passes[s]) for s in SIDES)
    fast, slow = (statistics.median(speeds[s]) for s in reversed(list(SIDES)))
    print(f"  after / before: pass {after / before:.2f}x the time, greedy_decode {fast / slow:.2f}x the tokens/s; "
          f"transformers' generate (one run, after the rounds) {hf_speed:.1f} tokens/s")


if __name__ == "__main__":
    main()
