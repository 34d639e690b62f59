#!/usr/bin/env bash
# Reproduce the drafters shipped in assets/drafters/ for SmolLM2-135M-Instruct.
# 1. Training data (cached target hidden states, resumable):
#      python -m gumiho.train.textdata --out data/wiki --limit 4000      # teacher-forced Wikipedia paragraphs
#      python -m gumiho.train.prompts --out data/prompts.jsonl --n 3000 --seed 0
#      python -m gumiho.train.distill --prompts data/prompts.jsonl --out data/distill --limit 1280
#    (the shipped drafters used the shards that existed when training started: see each model card)
# 2. The three drafters, same data, same settings, same token budget, trained side by side.
#    The shipped drafters: first EPOCHS=1, then EPOCHS=2, which continues each run from its
#    checkpoint (the cosine schedule is stretched to the new length: a warm restart at step 94).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
DATA=${DATA:-data/wiki,data/distill,data/distill}   # self-distilled shards counted twice
COMMON=(--data "$DATA" --epochs "${EPOCHS:-1}" --batch-tokens 2048 --lr 8e-4 --warmup-steps 10 --draft-vocab 8192
        --checkpoint-every 10 --eval-fraction 0.03 --max-minutes "${MAX_MINUTES:-62}")
for kind in gumiho serial parallel; do
  nohup "$PY" -m gumiho.train --kind "$kind" --out "runs/smollm2-135m-$kind" "${COMMON[@]}" \
    > "runs/train-$kind.log" 2>&1 &
done
wait
