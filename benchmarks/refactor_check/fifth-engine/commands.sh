#!/usr/bin/env bash
# Behaviour kept across the fifth house step: main before it (cbd993a) against HEAD.
set -u
cd "$(dirname "$0")/../../.."   # the repository root; run from a venv with requirements-dev.txt
ROOT=$(pwd)
export GUMIHO_RUNTIME=torch
OUT=$ROOT/benchmarks/refactor_check/fifth-engine
mkdir -p $OUT
rm -rf $ROOT/../before5; git worktree add --detach $ROOT/../before5 cbd993a >/dev/null 2>&1
common=(--fixed-size --threads 2 --no-progress)
for side in before after; do
  src=$ROOT/../before5; [ $side = after ] && src=$ROOT
  mkdir -p $OUT/$side
  (cd $src && PYTHONPATH=$src python -m gumiho.bench --prompts benchmarks/prompts/mt_bench.jsonl --limit 2 \
     --max-new-tokens 32 --methods vanilla,gumiho,serial,parallel,eagle,gumiho+copy,copy "${common[@]}" \
     --out $OUT/$side/mt_bench-greedy.json > /dev/null 2>&1)
  (cd $src && PYTHONPATH=$src python -m gumiho.bench --prompts benchmarks/prompts/humaneval.jsonl --limit 2 \
     --first-n --max-new-tokens 24 --temperature 0.7 --top-p 0.9 --sample-top-k 40 --seed 11 --warmup 0 \
     --total-tokens 8 --depth 4 --top-k 2 --mlp-top-k 2 --mlp-keep 2 --full-tree-tokens 2 \
     --copy-tokens 3 --copy-min-match 2 --methods vanilla,gumiho,gumiho+copy "${common[@]}" \
     --out $OUT/$side/humaneval-flags.json > /dev/null 2>&1)
done
python -m gumiho.bench.same_behaviour $OUT/before $OUT/after > $OUT/result.txt 2>&1; echo "same_behaviour rc=$?" >> $OUT/result.txt
unset GUMIHO_RUNTIME
PYTHONPATH=. python research/app_records.py --out $ROOT/benchmarks/refactor_check/app/after-engine.json > /dev/null 2>&1
diff <(python -m json.tool benchmarks/refactor_check/app/before.json) <(python -m json.tool benchmarks/refactor_check/app/after-engine.json) > /dev/null; echo "app diff rc=$?" >> $OUT/result.txt
git worktree remove --force $ROOT/../before5
echo done >> $OUT/result.txt
