#!/usr/bin/env bash
# Two checkouts of ladref in turns (OLD: the commit before eager passes shared their key/value heads;
# NEW: the one after), B = 1 and 2, three rounds, each run in a process of its own:
#     bash b12_driver.sh OLD_CHECKOUT NEW_CHECKOUT > b12_ab.log
OLD=$1 NEW=$2
cd "$(dirname "$0")"
for r in 1 2 3; do
  for B in 1 2; do
    if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for v in $order; do
      if [ $v = old ]; then P=$OLD; else P=$NEW; fi
      echo "round $r $v: $(PYTHONPATH=$P python b12_ab.py $B 2>&1 | tail -1)"
    done
  done
done
