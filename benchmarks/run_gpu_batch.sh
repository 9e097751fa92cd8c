#!/usr/bin/env bash
# Speculation under load on a GPU with the batch-native step (ladref.batched): 12 Spec-Bench prompts decoded
# 1, 12 and 4 at a time by batched greedy, transformers' generate() and the draft rules, float16, 64 new
# tokens (ladref.bench.load; each batch size is saved as it ends). Fits one ten-minute device call.
#
# Usage: bash benchmarks/run_gpu_batch.sh [OUT]   (default benchmarks/results_gpu/load_batched)
set -uo pipefail
cd "$(dirname "$0")/.."
R="${1:-benchmarks/results_gpu/load_batched}"
mkdir -p "$R"
export PYTHONUNBUFFERED=1
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$R/gpu.txt"
timeout "${BUDGET:-470}" python -m ladref bench --dtype float16 --no-progress --dataset specbench --limit 2 --batch 1,12,4 \
    --max-new-tokens 64 --lookup-tokens 4 --method greedy,generate,adaptive,lookahead,prompt_lookup,threshold \
    --out "$R" --figure "$R/load_cuda.png" 2>&1 | tee "$R/load.log"
