"""Which draft tree each runtime wants: vanilla and the shipped Gumiho drafter with
several trees, on the torch (float32) and the llama.cpp (4-bit) runtime (``--layout``: its file),
the same prompts, interleaved per prompt, one process per runtime. The measurement
behind TreeSettings.for_target (docs/llamacpp.md).

    python research/runtime_trees.py --runtime llama.cpp
    python research/runtime_trees.py --runtime llama.cpp --layout q4_1   # the shipped file
    python research/runtime_trees.py --runtime torch

Trees: the float32 CPU tree (TreeSettings.for_device("cpu"): 5 nodes, depth 3), the
same tree sized by measured cost, chains of two and of one (the drafter's first
guess only), each with the copy proposer beside it where named, and copying alone.
Speedup is vanilla's wall time over the method's, summed over the prompts."""
import argparse
import dataclasses
import json
import os
import time

from gumiho import GenerationSettings, generate, with_copy
from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_drafter, load_target, shipped_drafter_path
from gumiho.tree import TreeSettings


def chain(n: int) -> TreeSettings:
    return TreeSettings(total_tokens=n, depth=n, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
                        full_tree_tokens=0)


def main():
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", required=True, choices=("torch", "llama.cpp"))
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--layout", default=None, help="the llama.cpp runtime's file (gumiho.runtimes.llamacpp_files: q4_0, q4_1)")
    args = ap.parse_args()
    target = load_target(runtime=args.runtime, layout=args.layout)
    drafter = load_drafter(shipped_drafter_path("gumiho"), target)
    with open(args.prompts) as f:
        prompts = [json.loads(line)["turns"][0] for line in f][: args.limit]
    cpu = TreeSettings.for_device("cpu")
    sized = dataclasses.replace(cpu, cost_aware=True)
    methods = [("vanilla", None, cpu), ("gumiho, cpu tree", drafter, cpu),
               ("gumiho+copy, cpu tree", with_copy(drafter), cpu), ("gumiho, cost-aware", drafter, sized),
               ("gumiho, chain of 2", drafter, chain(2)), ("gumiho, chain of 1", drafter, chain(1)),
               ("gumiho+copy, chain of 1", with_copy(drafter), chain(1)), ("copy only", with_copy(None), cpu),
               ("copy only, cost-aware", with_copy(None), sized), ("gumiho+copy, cost-aware", with_copy(drafter), sized)]
    for _, proposer, tree in methods:  # first-call allocations (and the cost-aware tree's timing) off the clock
        generate(target, "Hello", proposer, GenerationSettings(max_new_tokens=4, tree=tree))
    totals = {name: [0.0, 0, 0, 0.0] for name, _, _ in methods}  # wall s, tokens, steps, drafting s
    for prompt in prompts:
        for name, proposer, tree in methods:
            t0 = time.perf_counter()
            r = generate(target, prompt, proposer, GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree))
            t = totals[name]
            t[0] += time.perf_counter() - t0
            t[1] += len(r.tokens)
            t[2] += len(r.steps)
            t[3] += r.stats.draft_s
    base = totals["vanilla"][0]
    print(f"{len(prompts)} prompts of {args.prompts}, {args.max_new_tokens} new tokens, greedy; "
          f"runtime {target.runtime.describe()}")
    for name, (wall, n, steps, draft) in totals.items():
        print(f"{name:26s} {n / wall:6.1f} tokens/s  speedup {base / wall:.2f}x  tau {n / steps:.2f}  "
              f"drafting {1e3 * draft / steps:.1f} ms/step")


if __name__ == "__main__":
    main()
