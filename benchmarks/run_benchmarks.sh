#!/usr/bin/env bash
# The runs behind BENCHMARKS.md: the four methods on each of the six prompt sets,
# same limit and max-new-tokens for all, then the report.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
LIMIT=${LIMIT:-10}
MAX_NEW=${MAX_NEW:-64}
OUT=${OUT:-benchmarks/results}   # another folder (and REPORT=0) to compare candidate drafters first
REPORT=${REPORT:-1}
mkdir -p "$OUT"
for set in mt_bench humaneval gsm8k alpaca qa sum; do
  "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$LIMIT" --max-new-tokens "$MAX_NEW" \
    --methods vanilla,gumiho,serial,parallel --out "$OUT/$set.json" --no-progress
done
[[ $REPORT == 1 ]] || exit 0
"$PY" -m gumiho.bench.report benchmarks/results/*.json --out BENCHMARKS.md --commands benchmarks/run_benchmarks.sh \
  --notes benchmarks/notes.md --copy benchmarks/copy
