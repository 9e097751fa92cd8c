"""F.linear against W @ h^T for few rows: SmolLM2-135M's weight shapes, random float32, 2 threads.

Why `ladref.runner.forward_logits` computes the output head of a pass of several rows itself.
Medians of repeated calls (microseconds). Its log: head_gemm.log.
"""
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
SHAPES = {"output head 49152x576": (49152, 576), "MLP up 1536x576": (1536, 576), "MLP down 576x1536": (576, 1536),
          "attention q 576x576": (576, 576)}


def median_us(call, repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


for name, (n, k) in SHAPES.items():
    weight, repeats = torch.randn(n, k), 20 if n > 10_000 else 300
    print(f"{name}: rows, F.linear(h, W) us, (W @ h^T)^T us")
    for rows in (1, 2, 3, 4, 8, 16, 64, 256):
        h = torch.randn(rows, k)
        linear, own = median_us(lambda: F.linear(h, weight), repeats), median_us(lambda: (weight @ h.T).T, repeats)
        print(f"  {rows:4d} {linear:9.0f} {own:9.0f}")
