#!/usr/bin/env bash
# The copy proposer (gumiho.proposers.copying) against Gumiho alone and against what a user would
# pick instead, on the six prompt sets: the CPU tree with every method, then the paper's
# tree (as on a GPU) for tau. Records: benchmarks/copy/ and benchmarks/copy/paper_tree/;
# python -m gumiho.bench.report turns them into BENCHMARKS.md's copy section.
set -euo pipefail
cd "$(dirname "$0")/.."
# The float32 target the drafters were trained against (the torch runtime), as these records were made.
export GUMIHO_RUNTIME=torch
PY=${PY:-python}
LIMIT=${LIMIT:-10}
PAPER_LIMIT=${PAPER_LIMIT:-5}
MAX_NEW=${MAX_NEW:-64}
OUT=${OUT:-benchmarks/copy}
mkdir -p "$OUT/paper_tree"
for set in ${SETS:-mt_bench humaneval gsm8k alpaca qa sum}; do
  "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$LIMIT" --max-new-tokens "$MAX_NEW" \
    --methods vanilla,gumiho,gumiho+copy,copy,hf,hf-lookup --out "$OUT/$set.json" --no-progress
done
[[ ${PAPER:-1} == 1 ]] || exit 0
for set in ${SETS:-mt_bench humaneval gsm8k alpaca qa sum}; do
  "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$PAPER_LIMIT" --max-new-tokens "$MAX_NEW" \
    --methods vanilla,gumiho,gumiho+copy --total-tokens 63 --depth 7 --top-k 10 --mlp-top-k 5 --mlp-keep 35 \
    --full-tree-tokens 8 --out "$OUT/paper_tree/$set.json" --no-progress
done
