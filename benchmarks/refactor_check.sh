#!/usr/bin/env bash
# A refactor keeps behaviour: the same bench runs made with an earlier revision and with
# the working tree, compared on everything that does not depend on the clock (tokens,
# target forwards, tau, acceptance by position, who proposed what; see
# gumiho/bench/same_behaviour.py). Fixed-size trees, so no tree depends on a timing.
#
#   bash benchmarks/refactor_check.sh REV [OUT]     # e.g. REV = main~3; OUT default runs/refactor_check
#
# Four runs per side (the first three about 7 minutes each on 2 cores): MT-Bench and
# HumanEval greedy with every method, MT-Bench sampled with a fixed seed, and a short
# HumanEval run with the flags away from their defaults (temperature, top-p, top-k,
# seed, every tree option, the copy proposer's settings, no warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
# The float32 target the drafters were trained against (the torch runtime), as these records were made.
export GUMIHO_RUNTIME=torch
REV=${1:?usage: refactor_check.sh REV [OUT]}
OUT=${2:-runs/refactor_check}
PY=${PYTHON:-python}
mkdir -p "$OUT"
TREE=$(mktemp -d)
trap 'git worktree remove --force "$TREE" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$TREE" "$REV" >/dev/null

records() {  # records <checkout> <folder>
  local src=$1 dest=$2
  mkdir -p "$dest"
  common=(--fixed-size --threads 2 --no-progress)
  (cd "$src" && PYTHONPATH="$src" "$PY" -m gumiho.bench --prompts benchmarks/prompts/mt_bench.jsonl --limit 4 \
     --max-new-tokens 48 --methods vanilla,gumiho,serial,parallel,eagle,gumiho+copy,copy,hf "${common[@]}" \
     --out "$dest/mt_bench-greedy.json" >/dev/null)
  (cd "$src" && PYTHONPATH="$src" "$PY" -m gumiho.bench --prompts benchmarks/prompts/humaneval.jsonl --limit 4 \
     --max-new-tokens 48 --methods vanilla,gumiho,serial,parallel,eagle,gumiho+copy,copy,hf "${common[@]}" \
     --out "$dest/humaneval-greedy.json" >/dev/null)
  (cd "$src" && PYTHONPATH="$src" "$PY" -m gumiho.bench --prompts benchmarks/prompts/mt_bench.jsonl --limit 3 \
     --max-new-tokens 32 --temperature 0.8 --seed 7 --methods vanilla,gumiho,gumiho+copy,copy "${common[@]}" \
     --out "$dest/mt_bench-sampled.json" >/dev/null)
  (cd "$src" && PYTHONPATH="$src" "$PY" -m gumiho.bench --prompts benchmarks/prompts/humaneval.jsonl --limit 2 \
     --first-n --max-new-tokens 24 --temperature 0.7 --top-p 0.9 --sample-top-k 40 --seed 11 --warmup 0 \
     --total-tokens 8 --depth 4 --top-k 2 --mlp-top-k 2 --mlp-keep 2 --full-tree-tokens 2 \
     --copy-tokens 3 --copy-min-match 2 --methods vanilla,gumiho,gumiho+copy "${common[@]}" \
     --out "$dest/humaneval-flags.json" >/dev/null)
}

ABS_OUT=$(cd "$OUT" && pwd)
echo "before: $REV ($(git rev-parse --short "$REV"))"
records "$TREE" "$ABS_OUT/before"
echo "after: the working tree"
records "$(pwd)" "$ABS_OUT/after"
"$PY" -m gumiho.bench.same_behaviour "$ABS_OUT/before" "$ABS_OUT/after"
