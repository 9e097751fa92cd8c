#!/usr/bin/env bash
# Wall time of a fresh interpreter importing a building block (ladref.tree, masks, verify,
# sources.ngram_pool: torch only) against a decoder (from ladref import lookahead_decode: torch and
# transformers), three times each in turns, and whether transformers was imported.
#   bash benchmarks/results/import_time/import_time.sh > benchmarks/results/import_time/import_time.log
cd "$(dirname "$0")/../../.."
echo "# $(date -u '+%Y-%m-%d %H:%M') python $(python -c 'import sys; print(sys.version.split()[0])'), torch $(python -c 'import torch; print(torch.__version__)')"
for run in 1 2 3; do
    for what in "import ladref.tree, ladref.masks, ladref.verify, ladref.sources.ngram_pool" "from ladref import lookahead_decode"; do
        start=$(date +%s.%N)
        loaded=$(python -c "$what; import sys; print('transformers' in sys.modules)")
        echo "  run $run  $(python3 -c "print(f'{$(date +%s.%N) - $start:5.2f} s')")  transformers imported: $loaded  <- $what"
    done
done
