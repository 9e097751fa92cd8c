#!/usr/bin/env bash
# The GPU benchmark of run_gpu.sh cut to fit a machine lent for about ten minutes: small prompt counts,
# 128 new tokens, the cheapest and most telling stages first, each stage bounded by one shared deadline
# so that time a fast stage leaves over goes to the next. A stage cut by the deadline saves nothing;
# every stage that ends writes its results to benchmarks/results_gpu/ (as run_gpu.sh does) and its
# log to $OUT/<stage>.log (or benchmarks/results_gpu/logs/).
#
# Usage: BUDGET=540 bash benchmarks/run_gpu_short.sh     (seconds for all stages together; default 540)
#   STAGES="load compiled_lookahead" runs only the stages named (default: all, in the order below).
#   needs the same install as run_gpu.sh and a CUDA device. docs/gpu.md says what each stage gave.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
DEADLINE=$((START + ${BUDGET:-540}))
R="benchmarks/results_gpu"
LOG="${OUT:-$R/logs}"
mkdir -p "$R" "$LOG"
export PYTHONUNBUFFERED=1
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$LOG/gpu.txt"

stage() {  # stage NAME CAP_SECONDS command...: run it under min(CAP, time left), log, report
    local name=$1 cap=$2 left limit began
    shift 2
    [[ -z ${STAGES:-} || " $STAGES " == *" $name "* ]] || return 0
    left=$((DEADLINE - $(date +%s)))
    limit=$((cap < left ? cap : left))
    if ((limit < 20)); then echo "== $name: skipped, ${left}s left"; return; fi
    echo "== $name (at most ${limit}s)"
    began=$(date +%s)
    timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
    echo "== $name: exit $? after $(($(date +%s) - began))s"
    tail -n 25 "$LOG/$name.log"
}

BENCH=(python -m ladref bench --dtype float16 --no-progress --max-new-tokens 128 --block-size 8)
# 1. t(q) at three KV lengths, q up to 256 (the adaptive rows price their steps with it).
stage cost 60 python -m ladref bench --cost --dtype float16 --out "$R"
# 2. Agreement in float16, 2 prompts per dataset.
stage agreement_float16 100 "${BENCH[@]}" --agreement --dataset humaneval,mtbench,gsm8k --limit 2 --config 15/5/15 --out "$R"
# 3. Eager speed on 3 HumanEval prompts.
stage speed 110 "${BENCH[@]}" --dataset humaneval --limit 3 --method generate,hf_plookup,jacobi,lookahead \
    --config 15/5/15 --config 7/5/7 --out "$R"
# 4. Spec-Bench, one prompt per task, the draft-free sources and adaptive.
stage specbench 150 "${BENCH[@]}" --dataset specbench --limit 1 --method generate,lookahead,prompt_lookup,recycling,adaptive \
    --config 15/5/15 --out "$R"
# 5. The batched surface t(q, kv, B): where drafting stops paying under load.
stage cost_batch 60 python -m ladref bench --cost --batch 1,2,4,8,16 --dtype float16 --out "$R/cost_batch"
# 6. Speculation under load: 12 Spec-Bench prompts decoded 1, 12 and 4 at a time by batched greedy, generate()
#    and four draft rules (ladref.bench.load); each batch size is saved as it ends.
stage load 260 python -m ladref bench --dtype float16 --no-progress --dataset specbench --limit 2 --batch 1,12,4 \
    --max-new-tokens 64 --lookup-tokens 4 --method greedy,generate,lookahead,prompt_lookup,threshold,adaptive \
    --out "$R/load" --figure "$R/load/load_cuda.png"
# 7. Compiled greedy (CUDA graphs), one prompt: capture about 35 s.
stage compiled_greedy 90 "${BENCH[@]}" --dataset humaneval --limit 1 --method compiled_greedy --out "$R/compiled_greedy"
# 8. Compiled lookahead, one prompt, if time is left (one graph per step width: longer to capture). With the
#    graphs replaying, a 121-token step costs 1.7 one-token steps (docs/gpu.md): 7/5/7 beside 15/5/15.
stage compiled_lookahead 300 "${BENCH[@]}" --dataset humaneval --limit 1 --method compiled_greedy,compiled_lookahead \
    --config 15/5/15 --config 7/5/7 --out "$R/compiled_lookahead"
# 9. Compiled adaptive over three widths (1, 8, 32; one cache) and with sources that remember, one Spec-Bench
#    prompt per task, against eager and compiled greedy (captures about 110 s).
stage compiled_adaptive 280 python scripts/gpu_compiled_adaptive.py --device cuda --dtype float16 --widths 1,8,32

for folder in "$R" "$R/compiled_greedy" "$R/compiled_lookahead"; do
    [[ -n $(ls "$folder"/*.json 2>/dev/null) ]] && python benchmarks/render_results.py "$folder"
done
echo "results in $R, logs in $LOG, $(($(date +%s) - START))s in all"
