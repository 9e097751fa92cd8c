# The B = 4 load A/B: a worktree of the earlier commit at /work/wt_prev, this checkout at /work/main, the same venv.
set -e
ARGS="--no-progress --dataset specbench --limit 2 --batch 4 --method greedy,adaptive --max-new-tokens 64 --lookup-tokens 4 --threads 2"
for side in prev head prev2 head2; do
  case $side in prev*) dir=/work/wt_prev;; head*) dir=/work/main;; esac
  echo "== $side $(cd $dir && git rev-parse --short HEAD) load $(cut -d' ' -f1 /proc/loadavg)"
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python -m ladref bench $ARGS --out /tmp/ab_$side 2>&1 | grep -E "^\| 4 \|")
done
