#!/bin/bash
# scripts/batch_passes.py (B = 8 Spec-Bench prompts, 32 new tokens, batched greedy and adaptive in
# both orders) run from each checkout given, one process per checkout, in turns, two rounds:
#   benchmarks/results/load/deferred_prefill_b16/batch_passes_ab.sh OLD_CHECKOUT MID_CHECKOUT .
# batch_passes_ab.log: 3cf683a (before), 0dc4e62 (one pass fewer, waits that wake one thread) and
# the commit that added this script (and the rows' host work one row at a time).
SURFACE=benchmarks/results/load/threads_linears_b16/load_surface_cpu.json
for round in 1 2; do
  for dir in "$@"; do
    echo "== round $round: $(git -C "$dir" rev-parse --short HEAD)$(git -C "$dir" diff --quiet HEAD -- ladref || echo ' + uncommitted ladref changes')"
    PYTHONPATH="$dir" python "$dir/scripts/batch_passes.py" --batch 8 --max-new-tokens 32 --surface "$SURFACE" --runs 1 | grep -v "^B = "
  done
done
