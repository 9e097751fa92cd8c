"""Would packing a batch's rows pay on this CPU? A B = 2 pass, its linear layers over the padded rows or over the real ones.

A padded pass (ladref's layout, docs/batch.md) computes B x Q tokens, Q the widest row's step. The
production engines pack the requests' tokens end to end instead. Here row 0 feeds q tokens and
row 1 one (a step in which one row drafts), over 512 cached tokens each, float32 SmolLM2-135M,
2 threads. "padded" runs the pass as ladref does (`linear_scope` over 2q rows); "packed" computes
every linear layer over the q + 1 real rows only (gathered, W @ x^T, scattered back into the padded
layout; attention stays padded, which a packed cache would also change). Medians of 12 rounds,
the variants in turns, the order reversed every other round.

    python benchmarks/results/load/packed_rows/packed_rows_ab.py | tee -a benchmarks/results/load/packed_rows/packed_rows_ab.log
"""

import statistics
import time

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from transformers import DynamicCache

from ladref import load_default_model
from ladref.kernels import attention_scope, linear_scope, sdpa_backends, small_row_linear

KV, ROUNDS, WARM = 512, 14, 2


class PackedLinears(TorchFunctionMode):
    """Every F.linear over the rows `real` of its (B x Q) inputs only, the padded rows left zero."""

    def __init__(self, real: torch.Tensor) -> None:
        super().__init__()
        self.real = real

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is not F.linear:
            return func(*args, **kwargs)
        x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("bias")
        rows = x.numel() // x.shape[-1]
        flat = x.reshape(rows, -1).index_select(0, self.real)  # (T, K): the real rows
        out = flat.new_zeros(rows, weight.shape[0]).index_copy_(0, self.real, small_row_linear(flat, weight, bias))
        return out.reshape(*x.shape[:-1], weight.shape[0])


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_default_model()
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.randint(100, 20000, (2, KV)), past_key_values=cache, use_cache=True)
    kernels = sdpa_backends("auto", torch.device("cpu"), model.config._attn_implementation)

    def run(q: int, packed: bool) -> float:
        ids, positions = torch.randint(100, 20000, (2, q)), torch.arange(KV, KV + q).expand(2, q)
        mask = torch.zeros(2, 1, q, KV + q)
        mask[:, :, :, KV:] = torch.triu(torch.full((q, q), float("-inf")), 1)
        scope = PackedLinears(torch.arange(q + 1)) if packed else linear_scope(2 * q, True)  # row 0: q, row 1: its first
        start = time.perf_counter()
        with torch.no_grad(), attention_scope(kernels), scope:
            model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache, use_cache=True)
        seconds = time.perf_counter() - start
        cache.crop(-q)
        return seconds

    variants = [(1, False), (2, False), (2, True), (3, False), (3, True), (4, False), (4, True)]
    times = {v: [] for v in variants}
    for r in range(ROUNDS):
        for v in variants if r % 2 == 0 else variants[::-1]:
            seconds = run(*v)
            if r >= WARM:
                times[v].append(seconds)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} B = 2, {KV} cached, torch {torch.__version__}, 2 threads")
    for q, packed in variants:
        rows = q + 1 if packed else 2 * q
        print(f"  q={q} {'packed' if packed else 'padded'}  {rows} rows  {1000 * statistics.median(times[(q, packed)]):6.1f} ms")


if __name__ == "__main__":
    main()
