"""What batched greedy at B = 8 would need to make 4x the tokens per second of B = 1, prompts' prefill
included, on the 36 prompts and 128 new tokens of the load runs (`docs/benchmarks.md#longer-answers`).

Times, in one process: every prompt alone (its prefill and first token, then whole), and the same
prompts in batches of 8 in the load run's order (each batch's prefill and first token, then whole).
A batch prefills each row's prompt alone, the same work as at B = 1. From these: the time a batch's
pass took after the prefill (8 rows; 4 in the last batch, fewer as rows end), and the time it could
take at most for B = 8 to make 4x B = 1 (docs/benchmarks.md#how-far-a-batch-of-8-can-go-on-this-cpu).

    python benchmarks/results/load/b8_bound/b8_bound.py > benchmarks/results/load/b8_bound/b8_bound.log
"""
import time

import torch

from ladref import greedy_decode, load_default_model
from ladref.bench.datasets import encode_prompts, load_prompts

NEW, B = 128, 8


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    torch.set_num_threads(2)
    model, tokenizer = load_default_model("cpu", torch.float32)
    prompts, eos = encode_prompts(tokenizer, load_prompts("specbench", 6)), [tokenizer.eos_token_id]
    lengths = [p.shape[-1] for p in prompts]
    print(f"# cpu float32 SmolLM2-135M, 2 threads; {len(prompts)} Spec-Bench prompts (6 per task), {sum(lengths)} prompt "
          f"tokens ({min(lengths)}-{max(lengths)}), {NEW} new tokens each, greedy_decode", flush=True)
    greedy_decode(model, prompts[0], 2)  # warm-up
    pre1, _ = timed(lambda: [greedy_decode(model, p, 1, eos_token_id=eos) for p in prompts])
    whole1, rows = timed(lambda: [greedy_decode(model, p, NEW, eos_token_id=eos) for p in prompts])
    new = sum(len(r.token_ids) for r in rows)
    pre8 = whole8 = 0.0
    passes8 = 0
    for start in range(0, len(prompts), B):
        chunk = prompts[start:start + B]
        p, _ = timed(lambda: greedy_decode(model, chunk, 1, eos_token_id=eos))
        w, out = timed(lambda: greedy_decode(model, chunk, NEW, eos_token_id=eos))
        pre8, whole8, passes8 = pre8 + p, whole8 + w, passes8 + max(len(r.token_ids) for r in out) - 1
        print(f"batch {start // B}: {len(chunk)} rows, longest prompt {max(c.shape[-1] for c in chunk)}: prefill and first "
              f"token {p:.1f} s, whole {w:.1f} s, {(w - p) / max(len(r.token_ids) for r in out) * 1e3:.0f} ms a pass after", flush=True)
    passes1 = new - len(prompts)
    t1, t8 = (whole1 - pre1) / passes1, (whole8 - pre8) / passes8
    need = (whole1 / 4 - pre8) / passes8
    print(f"\n| | B = 1 | B = 8 |\n|---|---|---|")
    print(f"| whole, s | {whole1:.1f} | {whole8:.1f} |")
    print(f"| tokens/s, whole | {new / whole1:.1f} | {new / whole8:.1f} ({whole1 / whole8:.2f}x) |")
    print(f"| prompts' prefill and first token, s | {pre1:.1f} ({pre1 / whole1:.0%}) | {pre8:.1f} ({pre8 / whole8:.0%}) |")
    print(f"| tokens/s after it | {passes1 / (whole1 - pre1):.1f} | {passes1 / (whole8 - pre8):.1f} "
          f"({(whole1 - pre1) / (whole8 - pre8):.2f}x) |")
    print(f"| passes after it | {passes1} | {passes8} |")
    print(f"| ms a pass after it (the batch's passes: rows' host work included) | {t1 * 1e3:.1f} | {t8 * 1e3:.1f} "
          f"({t8 / t1:.2f}x B = 1's) |")
    print(f"\nFor 4x B = 1 whole, B = 8 must take <= {whole1 / 4:.1f} s: with its prefill as measured, <= {need * 1e3:.1f} ms "
          f"a batch's pass (8 rows; 4 in the last batch, fewer as rows end) = {need / t1:.2f}x a pass of one row; with no "
          f"prefill at either B (4x B = 1's passes alone), <= {(whole1 - pre1) / 4 / passes8 * 1e3:.1f} ms "
          f"({(whole1 - pre1) / 4 / passes8 / t1:.2f}x).")


if __name__ == "__main__":
    main()
