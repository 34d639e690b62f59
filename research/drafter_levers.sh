#!/usr/bin/env bash
# Issue "drafter": which of the field's levers pays for the shipped Gumiho drafter, at an equal
# budget. Every step resumes where it stopped (finished shards, checkpoints and records are
# kept), so an interrupted run is continued by running it again.
#
#   PART=prompts   data/prompts-r8.jsonl: prompts people wrote that no shipped stage used:
#                  the 466 of corpus/prompts/instructions.jsonl after stage 7's first 128, then
#                  InstructLab taxonomy questions of at most 600 characters after the 2,944 (and
#                  the 256 longer-list ones) stage 5 used (corpus/README.md: licences)
#   PART=distill   the target's own answers to them (bfloat16 writer, float32 hidden states)
#   PART=train     four arms from the shipped drafter, same data, steps, lr and seed:
#                    continued        today's recipe (cross-entropy, as stage 7)
#                    continued-ttt    + --ttt-steps 2 (training-time test past the drafted depth)
#                    continued-lk     + --lk-weight 1 (-log sum min(p, q) by position)
#                    continued-both   both
#   PART=bench     each arm and the shipped drafter on the six sets (TAU_LIMIT prompts each,
#                  default 5; CPU tree; one process, every text checked against vanilla's),
#                  then MT-Bench with vanilla (CPU tree and the paper's tree, 10 prompts):
#                  research/recipe_ablation.py taus / bench / report
#   PART=all       all of it (default)
#
# N_TAX taxonomy prompts are added (default 534: 1,000 prompts in all); STEPS (default 100) at
# --batch-tokens 2048; THREADS torch threads for every step (default 1, so the other core stays
# free for other work).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PART=${PART:-all}
N_TAX=${N_TAX:-534}
STEPS=${STEPS:-100}
THREADS=${THREADS:-1}
OUT=${OUT:-runs/levers}
# the float32 target the drafters are trained against (the issue's targets are on it)
export GUMIHO_RUNTIME=torch
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
mkdir -p data "$OUT"
ARMS=continued,continued-ttt,continued-lk,continued-both

if [[ $PART == all || $PART == prompts ]]; then
  "$PY" - "$N_TAX" > data/prompts-r8.jsonl <<'EOF'
import json, sys
n_tax = int(sys.argv[1])
lines = open("corpus/prompts/instructions.jsonl").readlines()[128:]
tax = open("corpus/prompts/taxonomy.jsonl").readlines()
# stage 5's rule: drop lines 1-128 and 3482-3609, keep prompts of at most 600 characters;
# it distilled the first 2,944 of what is left
rest = [l for i, l in enumerate(tax, 1) if not (i <= 128 or 3482 <= i <= 3609)]
short = [l for l in rest if len(json.loads(l)["prompt"]) <= 600]
sys.stdout.writelines(lines + short[2944:2944 + n_tax])
EOF
  wc -l data/prompts-r8.jsonl
fi
if [[ $PART == all || $PART == distill ]]; then
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-r8.jsonl --out data/distill-r8 \
    --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads "$THREADS" --write-dtype bfloat16
fi
if [[ $PART == all || $PART == train ]]; then
  "$PY" research/recipe_ablation.py train --data data/distill-r8 --out "$OUT" --arms "$ARMS" \
    --max-steps "$STEPS" --lr 2e-4
fi
if [[ $PART == all || $PART == bench ]]; then
  "$PY" research/recipe_ablation.py taus --out "$OUT" --arms "shipped,$ARMS" --limit "${TAU_LIMIT:-5}"
  "$PY" research/recipe_ablation.py bench --out "$OUT" --arms "shipped,$ARMS" --limit 10
  "$PY" research/recipe_ablation.py report --out "$OUT" --arms "shipped,$ARMS" --baseline continued
fi
