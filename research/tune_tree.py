"""Sweep draft-tree sizes for a drafter on this machine: tau (exact, independent of
machine load) and the measured per-step cost ratio, interleaved with vanilla runs.

    python research/tune_tree.py --drafter assets/drafters/smollm2-135m-gumiho \
        --prompts benchmarks/prompts/mt_bench.jsonl --limit 5 --max-new-tokens 48
    python research/tune_tree.py --drafter assets/drafters/smollm2-135m-gumiho \
        --prompts benchmarks/prompts/gsm8k.jsonl --limit 10 --max-new-tokens 64 --tau-only --trees 4,5,6

An AVX2 CPU's kernels, on an AVX-512 machine (oneDNN and ATen capped at AVX2; the
drafter in float32, as the dtype rule picks on a CPU without bf16 instructions):

    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python research/tune_tree.py ... --drafter-dtype fp32
"""
from __future__ import annotations

import argparse
import json
import os
import time

from gumiho import GenerationSettings, TreeSettings, load_drafter, load_target, stream, summarize
from gumiho.bench import load_prompts, prompt_ids
from gumiho.engine.verifycost import tokens_needed, verify_cost_for
from gumiho.files import LibraryPaths, configure

# The last two CPU defaults, rows 5 and 18: 7 drafted nodes plus up to 1 full-tree
# node (9 with the root), and 5 drafted nodes without (6 with the root).
NINE_NODES = dict(total_tokens=7, depth=5, serial_top_k=4, mlp_top_k=2, mlp_keep=3, full_tree_tokens=1)
SIX_NODES = dict(total_tokens=5, depth=3, serial_top_k=4, mlp_top_k=2, mlp_keep=3, full_tree=False, full_tree_tokens=0)

GRID = [
    dict(total_tokens=4, depth=4, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree_tokens=2),  # a chain
    dict(total_tokens=5, depth=5, serial_top_k=2, mlp_top_k=1, mlp_keep=2, full_tree_tokens=2),
    dict(total_tokens=3, depth=3, serial_top_k=2, mlp_top_k=1, mlp_keep=2, full_tree_tokens=1),
    dict(total_tokens=4, depth=4, serial_top_k=2, mlp_top_k=1, mlp_keep=2, full_tree_tokens=2),
    # Rows 4-6 share a budget of 8 drafted nodes. Row 4 was the CPU default while the
    # drafter ran in float32; row 5, with 4 first-position candidates, followed it;
    # row 6 spends the full-tree node on the base tree instead.
    dict(total_tokens=6, depth=5, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree_tokens=2),
    NINE_NODES,
    dict(NINE_NODES, total_tokens=8, full_tree=False, full_tree_tokens=0),
    # The old default's candidate pool (same drafting work), more of it verified.
    dict(total_tokens=8, depth=5, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree_tokens=2),
    dict(total_tokens=10, depth=5, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree_tokens=3),
    dict(total_tokens=8, depth=6, serial_top_k=3, mlp_top_k=2, mlp_keep=4, full_tree_tokens=3),
    dict(total_tokens=12, depth=6, serial_top_k=4, mlp_top_k=2, mlp_keep=6, full_tree_tokens=4),
    dict(total_tokens=20, depth=6, serial_top_k=4, mlp_top_k=2, mlp_keep=6, full_tree_tokens=4),
    # Rows 12-17: the 9-node tree (row 5) with one thing changed. More first-position
    # candidates at the same budget; a shallower tree (fewer MLP heads to run); one or
    # two more drafted nodes (a verify forward over 10 or 11 tokens).
    dict(NINE_NODES, serial_top_k=5),
    dict(NINE_NODES, serial_top_k=6),
    dict(NINE_NODES, depth=4),
    dict(NINE_NODES, depth=3),
    dict(NINE_NODES, total_tokens=8),
    dict(NINE_NODES, total_tokens=9),
    # Rows 18-20: trees of 6 and 12 nodes (root included). On an AVX-512 CPU the target's
    # packed products take rows in blocks of about six: a forward over 3-6 tokens costs
    # no more than a one-token forward, over 7-12 tokens a few ms more, over 13 more again
    # (profile_step.py --verify-sizes). Row 18 is the CPU default.
    SIX_NODES,
    dict(SIX_NODES, depth=5),
    dict(SIX_NODES, total_tokens=11, depth=5),
    # Row 21: a cost-aware tree: up to 11 drafted nodes, each step verifying as many as
    # pay for themselves at the verify cost measured on this machine (gumiho.engine.verifycost).
    dict(SIX_NODES, total_tokens=11, cost_aware=True),
]


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--limit", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--tau-only", action="store_true",
                    help="no vanilla runs and no timing: tau is exact and does not depend on the machine's load")
    ap.add_argument("--drafter-dtype", default="auto", help="auto (default), fp32, bf16: as gumiho.bench's")
    ap.add_argument("--trees", default=None, help="comma-separated row numbers of the grid (0-based; default all)")
    args = ap.parse_args(argv)
    target = load_target()
    drafter = load_drafter(args.drafter, target, dtype=args.drafter_dtype)
    prompts = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
    if not args.tau_only:
        # Warm-up, not counted: the first forwards of a process are slow (allocations,
        # kernel set-up), which would flatter the first row's speedup.
        for tree in (None, TreeSettings.for_device(target.device)):
            list(stream(target, prompts[0], drafter if tree else None,
                        GenerationSettings(max_new_tokens=16, tree=tree)))
    rows = []
    rows_wanted = range(len(GRID)) if not args.trees else [int(i) for i in args.trees.split(",")]
    for grid in [GRID[i] for i in rows_wanted]:
        tree = TreeSettings(**grid)
        if tree.cost_aware:  # measured once, before any timing
            cost = verify_cost_for(target, tokens_needed(tree))
            print(json.dumps({"verify_ms_measured": [round(1000 * c, 2) for c in cost.measured],
                              "verify_ms_fitted": [round(1000 * c, 2) for c in cost.seconds]}), flush=True)
        van_s = spec_s = 0.0
        steps_all = []
        for ids in prompts:
            if not args.tau_only:
                t0 = time.perf_counter()
                list(stream(target, ids, None, GenerationSettings(max_new_tokens=args.max_new_tokens)))
                van_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            steps_all += list(stream(target, ids, drafter, GenerationSettings(max_new_tokens=args.max_new_tokens,
                                                                              tree=tree)))
            spec_s += time.perf_counter() - t0
        st = summarize(steps_all, drafter.cfg.max_depth)
        rows.append({"tree": grid, "tau": round(st.tau, 3), "target_forwards": st.target_forwards,
                     "mean_drafted": round(st.mean_drafted, 2),  # per verify step, as the bench's
                     "speedup": None if args.tau_only else round(van_s / spec_s, 3),
                     "acceptance": [round(a, 3) for a in st.acceptance_by_position()]})
        print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
