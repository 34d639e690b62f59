#!/usr/bin/env bash
# The drafter's 4-bit products (gumiho.kernels.int4linear) against its bfloat16 products: the
# engine benchmark's llama.cpp rows on both 4-bit files, and the torch runtime's CPU
# tree (where the drafter's deeper positions, MLP heads included, are drafted), with
# each drafter precision in its own run against that run's vanilla. Records in
# benchmarks/int4_drafter/. Needs a CPU with AVX512-BF16 for the 4-bit products.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/int4_drafter
PY=${PY:-python}
common=(--prompts benchmarks/prompts/mt_bench.jsonl --limit 10 --max-new-tokens 64 --threads 2 --no-progress)
for layout in q4_1 q4_0; do
  for dt in bf16 int4; do
    GUMIHO_LAYOUT=$layout "$PY" -m gumiho.bench "${common[@]}" --runtime llama.cpp --drafter-dtype $dt \
      --methods vanilla,gumiho,gumiho+copy --out $out/mt_bench-$layout-$dt.json
  done
done
for dt in bf16 int4; do
  "$PY" -m gumiho.bench "${common[@]}" --runtime torch --drafter-dtype $dt --methods vanilla,gumiho \
    --out $out/mt_bench-torch-$dt.json
done
