#!/usr/bin/env bash
# The shipped Gumiho drafter continued on new data, two arms alike in all but one thing:
#   widen      widened to fused target features (layers 2, 15 and 30 of the target's 30; the
#              last is the state it reads now, so it starts as the same drafter:
#              gumiho.train.widen), then trained;
#   continued  reading the last state as before (the control).
# Same data, steps, learning rate and seed; cross-entropy only and lr 2e-4, as the shipped
# drafter's last stage (a change of loss would move both arms for a reason of its own). Then
# both are checked against the shipped drafter on the six sets and the probe sets. Every part resumes where it stopped: rerun
# the same command.
#
#   PART=data   the template prompts of set 8 (research/template_prompts.sh: 3,698 prompts, the
#               translate source among them), answered
#               by the target (float32: a bfloat16 writer answers differently, and is slow on a
#               CPU without native bf16 matmuls); the first LIMIT_PROMPTS of them. Then the fused
#               feature cache of layers 2,15,30 (data/feat-t8w).
#   PART=train  both arms side by side (STEPS each; logs in OUT-ARM.log)
#   PART=check  `research/recipe_ablation.py check --check-arms $CHECK_ARMS` (default widen,continued; LIMIT prompts per
#               set, CPU tree, and MT-Bench with the paper's tree). Run it alone: it times decoding.
#   PART=all    data, train (default)
#   PART=more   a second stage: the rest of set 8 answered and cached (all 3,698 prompts), then
#               the trained widen arm continued on all of it for STEPS2 steps, alone on both
#               cores (arm widen-2); then `PART=check CHECK_ARMS=widen-2,widen` checks it. Its
#               held-out split is drawn over the larger data, so it holds sequences that the
#               first stage trained on: its held-out figures are not comparable with the
#               first stage's; the prompt sets of the check are.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PART=${PART:-all}
OUT=${OUT:-runs/continue}
STEPS=${STEPS:-400}
LIMIT=${LIMIT:-10}
LIMIT_PROMPTS=${LIMIT_PROMPTS-2688}  # the first 21 shards of 128 (empty: all 3,698)
STEPS2=${STEPS2:-500}
CHECK_ARMS=${CHECK_ARMS:-widen,continued}
[[ $PART == more ]] && LIMIT_PROMPTS=

[[ $PART == check ]] || export OMP_WAIT_POLICY=PASSIVE

if [[ $PART == all || $PART == data || $PART == more ]]; then
  PY="$PY" bash research/template_prompts.sh t8
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-t8.jsonl --out data/distill-t8 \
      --batch-size 64 --shard-size 128 --max-new-tokens 192 ${LIMIT_PROMPTS:+--limit "$LIMIT_PROMPTS"}
  "$PY" -m gumiho.train.features --data data/distill-t8 --out data/feat-t8w --layers 2,15,30
fi

if [[ $PART == all || $PART == train ]]; then
  # Side by side, one thread each: both arms get the same share of the machine, and two
  # one-thread runs get more out of two cores than two two-thread runs in turn.
  mkdir -p "$(dirname "$OUT")"
  pids=()
  for arm in widen continued; do
    OMP_NUM_THREADS=1 "$PY" research/recipe_ablation.py train --data data/feat-t8w --out "$OUT" --max-steps "$STEPS" \
        --lr 2e-4 --arms "$arm" > "$OUT-$arm.log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [[ $failed == 0 ]] || { echo "a training run failed: see $OUT-widen.log and $OUT-continued.log" >&2; exit 1; }
fi

if [[ $PART == more ]]; then
  OMP_NUM_THREADS=2 "$PY" research/recipe_ablation.py train --data data/feat-t8w --out "$OUT" --max-steps "$STEPS2" \
      --lr 2e-4 --arms widen-2 > "$OUT-widen-2.log" 2>&1
fi

if [[ $PART == check ]]; then
  "$PY" research/recipe_ablation.py check --out "$OUT" --check-arms "$CHECK_ARMS" --limit "$LIMIT"
fi
