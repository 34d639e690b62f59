#!/usr/bin/env bash
# The runs behind BENCHMARKS.md: the four methods on each of the six prompt sets,
# same limit and max-new-tokens for all, then the report.
set -euo pipefail
cd "$(dirname "$0")/.."
# These records are of the float32 target the drafters were trained against (the torch
# runtime); the llama.cpp runtime's records below ask for it by name.
export GUMIHO_RUNTIME=torch
PY=${PY:-python}
LIMIT=${LIMIT:-10}
MAX_NEW=${MAX_NEW:-64}
OUT=${OUT:-benchmarks/results}   # another folder (and REPORT=0) to compare candidate drafters first
REPORT=${REPORT:-1}
mkdir -p "$OUT"
for set in mt_bench humaneval gsm8k alpaca qa sum; do
  "$PY" -m gumiho.bench --prompts "benchmarks/prompts/$set.jsonl" --limit "$LIMIT" --max-new-tokens "$MAX_NEW" \
    --methods vanilla,gumiho,serial,parallel --out "$OUT/$set.json" --no-progress
done
[[ $REPORT == 1 ]] || exit 0
# This engine beside vLLM and transformers (batch 1; vLLM also at 8 and 32), on a machine doing nothing else.
# Both 4-bit files (gumiho.runtimes.llamacpp_files) and every candidate layout's verify cost curve.
[[ -f benchmarks/engines/mt_bench.json ]] || "$PY" -m gumiho.bench.engines --prompts benchmarks/prompts/mt_bench.jsonl \
  --limit 10 --max-new-tokens 64 --batch-sizes '' --out benchmarks/engines/mt_bench.json
# The 4-bit layouts: exactness against float32 per prompt set, the drafter's share of a step, the
# sets where copying could pay, on each file.
[[ -f benchmarks/layouts/exactness.json ]] || "$PY" -m gumiho.bench.layouts --exactness-only --limit 3 \
  --candidates q4_1,q4_0,iq4_nl,q8_0 --out benchmarks/layouts/exactness.json
[[ -f benchmarks/layouts/runtime_step.txt ]] || PYTHONPATH=. "$PY" research/runtime_step.py \
  --prompts benchmarks/prompts/mt_bench.jsonl --limit 4 > benchmarks/layouts/runtime_step.txt
# The drafter's 4-bit products against its bfloat16 ones (gumiho.kernels.int4linear), paired prompt by prompt,
# and each precision's own engine-benchmark run on the llama.cpp runtime (needs AVX512-BF16).
[[ -f benchmarks/int4_drafter/paired.txt ]] || PYTHONPATH=. "$PY" research/int4_drafter.py --limit 10 \
  > benchmarks/int4_drafter/paired.txt
[[ -f benchmarks/int4_drafter/mt_bench-torch-int4.json ]] || bash benchmarks/run_int4_drafter.sh
for layout in q4_1 q4_0; do for set in sum humaneval; do
  [[ -f "benchmarks/layouts/$set-$layout.json" ]] || GUMIHO_LAYOUT=$layout "$PY" -m gumiho.bench --runtime llama.cpp \
    --prompts "benchmarks/prompts/$set.jsonl" --limit 10 --max-new-tokens 64 --methods vanilla,gumiho,gumiho+copy \
    --threads 2 --no-progress --out "benchmarks/layouts/$set-$layout.json"
done; done
# vLLM serving the target alone, with the shipped eagle3 drafter and with the shipped gumiho drafter
# (the vllm-gumiho plugin), at batch 1, 8 and 32: one server per method, requests interleaved.
[[ -f benchmarks/engines/mt_bench_vllm.json ]] || "$PY" -m gumiho.bench.engines --vllm-only \
  --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 --max-new-tokens 64 --out benchmarks/engines/mt_bench_vllm.json
# llama.cpp's own server (built once from the pinned source) without drafting, with EAGLE-3 drafting
# by the shipped eagle3 drafter and with its n-gram drafting, beside this engine on the same 4-bit file.
[[ -f benchmarks/engines/mt_bench_llamacpp.json ]] || "$PY" -m gumiho.bench.engines --llamacpp-only \
  --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 --max-new-tokens 64 --out benchmarks/engines/mt_bench_llamacpp.json
# The GGUF as stored (the llama.cpp runtime, the default on a CPU): exactness against float32, verify
# costs, the cost-aware tree on it, and which tree each runtime wants.
[[ -f benchmarks/asstored/alpaca.json ]] || "$PY" -m gumiho.bench.asstored --prompts benchmarks/prompts/alpaca.jsonl \
  --limit 20 --max-new-tokens 64 --out benchmarks/asstored/alpaca.json
[[ -f benchmarks/asstored/mt_bench-cost-aware.json ]] || "$PY" -m gumiho.bench --runtime llama.cpp --cost-aware \
  --prompts benchmarks/prompts/mt_bench.jsonl --limit 10 --max-new-tokens 64 --methods vanilla,gumiho,gumiho+copy \
  --no-progress --out benchmarks/asstored/mt_bench-cost-aware.json
for rt in llama.cpp torch; do
  [[ -f benchmarks/asstored/runtime_trees-$rt.txt ]] || PYTHONPATH=. "$PY" research/runtime_trees.py --runtime "$rt" \
    > "benchmarks/asstored/runtime_trees-$rt.txt"
done
# The engine peers (python -m gumiho.bench.engines, alone on the machine: it times vLLM too) and the
# Gumiho-vs-EAGLE-3 records (benchmarks/run_eagle3_vs_gumiho.sh) are sections of the same report.
"$PY" -m gumiho.bench.report benchmarks/results/*.json --out BENCHMARKS.md --commands benchmarks/run_benchmarks.sh \
  --notes benchmarks/notes.md --copy benchmarks/copy --eagle3 benchmarks/eagle3 --engines benchmarks/engines/mt_bench.json \
  --serving benchmarks/engines/mt_bench_vllm.json --llamacpp-server benchmarks/engines/mt_bench_llamacpp.json \
  --asstored benchmarks/asstored
