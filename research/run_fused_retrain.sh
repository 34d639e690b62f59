#!/usr/bin/env bash
# The four drafter kinds trained from scratch with the fused recipe (fused target
# features, layers 2, 15, 27, with the paper's loss: the recipe ablation's winner) at the
# shipped drafters' budget, about 4.8M tokens seen (2,970 steps of 2,048 padded tokens),
# then each checked against the shipped drafter of its kind. Every part resumes where it
# stopped (finished shards and training checkpoints are kept): rerun the same command.
#
#   PART=data     prompts -> the target's own answers -> the fused-feature cache (data/feat-4x;
#                 the data of the recipe ablation: 2,594 answers, 506,243 tokens)
#   PART=more-data  more answers, of the kinds the drafters do worst on (translation, passages,
#                 summaries): a template set that leaves out every earlier prompt, with the
#                 translate source (data/prompts-t8.jsonl: 3,698 prompts, the 302 of
#                 4,000 already in prompts-t7 left out), and the InstructLab
#                 taxonomy questions of at most 600 characters (the first TAX_LIMIT), then their
#                 fused-feature caches (data/feat-t8; data/features-taxonomy, made by
#                 research/build_recipe_data.sh); train on them with
#                 DATA=data/feat-4x,data/feat-t8,data/features-taxonomy
#   PART=train    the four kinds, one after another (ARMS, default all four; about 1 h gumiho,
#                 0.5 h parallel, 1.4 h eagle, 2.3 h serial on 2 cores)
#   PART=check    the new drafter of KIND (default gumiho) against the shipped one
#                 (`research/recipe_ablation.py check`: the six sets and the probe sets, LIMIT
#                 prompts each, CPU tree, and MT-Bench with the paper's tree; paired taus and
#                 each drafter's speedup). Run it alone on the machine: it times decoding.
#   PART=all      data, train (default)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PART=${PART:-all}
OUT=${OUT:-runs/kinds-ship}
STEPS=${STEPS:-2970}
ARMS=${ARMS:-fused fused-parallel fused-eagle fused-serial}
KIND=${KIND:-gumiho}
DATA=${DATA:-data/feat-4x}
TAX_LIMIT=${TAX_LIMIT:-1536}
LIMIT=${LIMIT:-20}
DISTILL=(--batch-size 64 --shard-size 128 --max-new-tokens 192 --write-dtype bfloat16)

# Distillation and training share the cores with nothing else: OpenMP threads may sleep
# between parallel regions. The check times decoding, whose many small steps that would slow.
[[ $PART == check ]] || export OMP_WAIT_POLICY=PASSIVE

if [[ $PART == all || $PART == data ]]; then
  mkdir -p data
  PY="$PY" bash research/template_prompts.sh t7
  tail -n +897 data/prompts-t7.jsonl > data/prompts-t7b.jsonl
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-t7.jsonl --out data/distill-t7 --limit 896 "${DISTILL[@]}"
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-t7b.jsonl --out data/distill-t7b "${DISTILL[@]}"
  "$PY" -m gumiho.train.sources.distill --prompts corpus/prompts/instructions.jsonl --out data/distill-instructions \
      "${DISTILL[@]}"
  "$PY" -m gumiho.train.features --data data/distill-t7,data/distill-t7b,data/distill-instructions \
      --out data/feat-4x --layers default
fi

if [[ $PART == more-data ]]; then
  PY="$PY" bash research/template_prompts.sh t8
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-t8.jsonl --out data/distill-t8 "${DISTILL[@]}"
  "$PY" -m gumiho.train.features --data data/distill-t8 --out data/feat-t8 --layers default
  SETS=taxonomy TAX_LIMIT="$TAX_LIMIT" PY="$PY" bash research/build_recipe_data.sh   # -> data/features-taxonomy
fi

if [[ $PART == all || $PART == train ]]; then
  for arm in $ARMS; do
    "$PY" research/recipe_ablation.py train --data "$DATA" --out "$OUT" --max-steps "$STEPS" --arms "$arm"
  done
fi

if [[ $PART == check ]]; then
  "$PY" research/recipe_ablation.py check --out "$OUT" --kind "$KIND" --limit "$LIMIT"
fi
