"""A/B in one process: the linear layers of a pass of 6 to 64 rows computed as W @ x^T inside
`ladref.kernels.linear_scope` (new: `SMALL_ROWS` widened to 2-64) against the rows it covered before
(old: 2-5, where the pass of 6-64 rows calls ``F.linear`` as the model does).

A measurement script: it rebinds ``ladref.kernels.SMALL_ROWS`` for each variant's turns (the library
has no switch). Step widths timed through `ModelRunner` at KV 512 (`head_ab.widths_ab`), then
greedy and adaptive over 12 Spec-Bench prompts and batched greedy over the first 8 and all 12 of
them (`head_ab.decoders_ab`). Its log: wide_linears_ab.log.

The width turns in its log measured nothing: `head_ab.widths_ab` then called ``use`` only when it
built the runners, and ``SMALL_ROWS`` is read at every pass, so both sides ran with the last
binding, the old one. `widths_ab` now calls it before every pass too; the measurement since is
`wide_rows/wide_rows_ab.py` (its log beside it).
"""
import sys

import ladref.kernels as kernels
from head_ab import decoders_ab, widths_ab

VARIANTS = {"old": range(2, 6), "new": range(2, 65)}


def use(variant: str) -> None:
    kernels.SMALL_ROWS = VARIANTS[variant]


if __name__ == "__main__":
    widths_ab(use, widths=(1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 20, 24, 32, 48, 64))
    if "--widths" not in sys.argv:
        decoders_ab(use, rounds=2, batches=(8, 12))
