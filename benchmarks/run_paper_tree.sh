#!/usr/bin/env bash
# The four methods on the six prompt sets with the paper's tree size (the GPU default of
# TreeSettings.for_device("cuda"): 63 drafted nodes plus up to 8 full-tree ones, depth 7),
# run on whatever device this is. On a CPU such a tree is slow to verify, so the speedups
# mean little there; tau does not depend on the machine, and this compares the three
# drafters at the tree size their paper compares them at. Records: benchmarks/paper_tree/.
set -euo pipefail
cd "$(dirname "$0")/.."
# The float32 target the drafters were trained against (the torch runtime), as these records were made.
export GUMIHO_RUNTIME=torch
PY=${PY:-python}
LIMIT=${LIMIT:-10}
MAX_NEW=${MAX_NEW:-64}
mkdir -p benchmarks/paper_tree
for set in ${SETS:-mt_bench humaneval gsm8k alpaca qa sum}; do
  "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$LIMIT" --max-new-tokens "$MAX_NEW" \
    --methods vanilla,gumiho,serial,parallel --total-tokens 63 --depth 7 --top-k 10 --mlp-top-k 5 --mlp-keep 35 \
    --full-tree-tokens 8 --out "benchmarks/paper_tree/$set.json" --no-progress
done
