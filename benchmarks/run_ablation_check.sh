#!/usr/bin/env bash
# Gumiho against its two ablations on every prompt of the six sets (80 each), tau only:
# tau counts target forwards and does not depend on the machine, so no vanilla runs or
# timings are needed, and two processes share the cores. Records go to benchmarks/all80/,
# then python -m gumiho.bench.compare_drafters gives each set's paired tau difference with a 95%
# bootstrap interval over prompts (the 10-prompt table in BENCHMARKS.md decides some sets
# by two or three target forwards).
set -euo pipefail
cd "$(dirname "$0")/.."
# The float32 target the drafters were trained against (the torch runtime), as these records were made.
export GUMIHO_RUNTIME=torch
PY=${PY:-python}
OUT=${OUT:-benchmarks/all80}
mkdir -p "$OUT"
run_sets() {
  local set
  for set in "$@"; do
    "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit 80 --max-new-tokens 64 \
      --methods gumiho,serial,parallel --threads 1 --out "$OUT/$set.json" --no-progress
  done
}
run_sets mt_bench humaneval gsm8k &
first=$!
run_sets sum qa alpaca
wait "$first"
"$PY" -m gumiho.bench.compare_drafters "$OUT"/*.json
