#!/usr/bin/env bash
# Gumiho vs EAGLE-3 like for like: the eagle3 kind and the gumiho kind trained from scratch on
# the same data (the target's own answers to new prompts and Wikipedia paragraphs teacher-forced;
# the recorded run stopped the distillation after 384 answers and the feature cache after 640
# paragraphs, for time: the trainer reads whole shards, so the rerun is the same data only if
# stopped at the same shards), the same fused target layers (2, 15, 27), the
# same batches, steps, learning rate, seed and loss (EAGLE-3's cross-entropy, no regression: the
# recipe the shipped Gumiho drafter's last stage used too). Then both drafters on the six
# prompt sets in one bench run per set (interleaved per prompt, the CPU tree), paired tau
# differences with 95% intervals, and held-out top-1 agreement by position.
#
#   bash benchmarks/run_eagle3_vs_gumiho.sh            # every step; a step whose output exists is skipped
#
# Records: benchmarks/eagle3/ (bench JSON per set, comparison and evaluation text).
set -euo pipefail
cd "$(dirname "$0")/.."
# The float32 target the drafters were trained against (the torch runtime), as these records were made.
export GUMIHO_RUNTIME=torch
PY=${PY:-python}
STEPS=${STEPS:-180}            # optimizer steps of each arm (x BATCH padded tokens)
BATCH=${BATCH:-2048}
LIMIT=${LIMIT:-8}
MAX_NEW=${MAX_NEW:-96}
OUT=benchmarks/eagle3
mkdir -p data runs/e3 "$OUT"

[[ -f data/prompts-e3.jsonl ]] || "$PY" -m gumiho.train.sources.prompts --out data/prompts-e3.jsonl --n 1500 --seed 21 \
  --mix tasks=0.7,wiki=0.1,math=0.1,code=0.1
# The target writes its answers (bfloat16 writer, float32 states); an interrupted run keeps its whole shards.
[[ -f data/distill-e3/manifest.json ]] || "$PY" -m gumiho.train.sources.distill --prompts data/prompts-e3.jsonl \
  --out data/distill-e3 --batch-size 32 --max-new-tokens 160 --write-dtype bfloat16 --hidden-batch-tokens 4096
[[ -f data/wiki-e3/manifest.json ]] || "$PY" -m gumiho.train.sources.textdata --out data/wiki-e3 --limit 900 --seed 21
# The fused layers' states cached once, for both arms.
"$PY" -m gumiho.train.features --data data/distill-e3,data/wiki-e3 --out data/features-e3 --layers default

common=(--data data/features-e3 --max-steps "$STEPS" --batch-tokens "$BATCH" --lr 8e-4 --warmup-steps 20
        --feature-layers default --features cached --eval-fraction 0.03 --seed 0 --checkpoint-every 20
        --ce-weight 1 --reg-weight 0)
[[ -f runs/e3/eagle3/training_summary.json ]] || "$PY" -m gumiho.train --kind eagle3 --out runs/e3/eagle3 "${common[@]}"
[[ -f runs/e3/gumiho/training_summary.json ]] || "$PY" -m gumiho.train --kind gumiho --out runs/e3/gumiho "${common[@]}"

for set in mt_bench humaneval gsm8k alpaca qa sum; do
  [[ -f "$OUT/$set.json" ]] || "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$LIMIT" \
    --max-new-tokens "$MAX_NEW" --methods vanilla,gumiho,eagle3 --drafter runs/e3/gumiho \
    --eagle3-drafter runs/e3/eagle3 --out "$OUT/$set.json" --no-progress
done
sets=("$OUT"/{mt_bench,humaneval,gsm8k,alpaca,qa,sum}.json)
"$PY" -m gumiho.bench.compare_drafters "${sets[@]}" --method gumiho --against eagle3 | tee "$OUT/compare.txt"
"$PY" -m gumiho.train.evaluate --data data/features-e3 runs/e3/gumiho runs/e3/eagle3 | tee "$OUT/held_out.txt"
