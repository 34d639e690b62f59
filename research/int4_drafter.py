"""The drafter's 4-bit products (gumiho.kernels.int4linear) against its bfloat16 ones, paired:
for each prompt vanilla, the bfloat16 drafter and the 4-bit one run back to back on
the same target, so the machine's drift falls on all three alike. On the llama.cpp
runtime (each 4-bit file, its own tree: a chain of one, with copying as the race
runs it) and on the torch float32 runtime (the CPU tree, and the paper's deep tree
for the acceptance cost where the MLP heads draft).

    python research/int4_drafter.py --limit 10      # record: benchmarks/int4_drafter/paired.txt

Speedup = vanilla's summed wall time / the method's over the same prompts; tau = new
tokens / target forwards. Every speculative run is checked against vanilla's tokens.
"""
import argparse
import os
import time

import torch

from gumiho import GenerationSettings, TreeSettings, generate, with_copy
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_drafter, load_target, shipped_drafter_path


def cases(limit: int):
    """(label, runtime, layout, tree, with copying, prompt count)."""
    for layout in ("q4_1", "q4_0"):
        yield f"llama.cpp {layout}, its tree, with copying", "llama.cpp", layout, None, True, limit
    yield "torch float32, the CPU tree", "torch", None, None, False, limit
    yield "torch float32, the paper's tree", "torch", None, TreeSettings(), False, max(1, limit // 2)


def main():
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.prompts}, {args.max_new_tokens} new tokens, greedy, {args.threads} threads")
    for label, runtime, layout, tree, copy, n in cases(args.limit):
        target = load_target(runtime=runtime, layout=layout)
        drafters = {dt: load_drafter(shipped_drafter_path("gumiho"), target, dtype=dt) for dt in ("bf16", "int4")}
        runs = [("vanilla", None)] + [(dt, with_copy(d) if copy else d) for dt, d in drafters.items()]
        ids = [prompt_ids(target, p) for p in load_prompts(args.prompts, n)]
        settings = GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree)
        for _, proposer in runs:  # first calls off the clock
            generate(target, prompt_ids=ids[0][:32], drafter=proposer,
                     settings=GenerationSettings(max_new_tokens=4, tree=tree))
        wall = {name: 0.0 for name, _ in runs}
        new = {name: 0 for name, _ in runs}
        forwards = {name: 0 for name, _ in runs}
        same = 0
        for p in ids:
            reference = None
            for name, proposer in runs:
                t0 = time.perf_counter()
                r = generate(target, prompt_ids=p, drafter=proposer, settings=settings)
                wall[name] += time.perf_counter() - t0
                new[name] += r.stats.new_tokens
                forwards[name] += r.stats.target_forwards
                if reference is None:
                    reference = r.tokens
                else:
                    same += r.tokens == reference
        print(f"{label} ({target.runtime.describe()}), {len(ids)} prompts; "
              f"identical to vanilla: {same}/{2 * len(ids)}")
        for name, _ in runs:
            words = {"vanilla": "vanilla", "bf16": "drafter bfloat16",
                     "int4": "drafter 4-bit products" if drafters["int4"].int4 else "drafter int4 (unavailable)"}
            print(f"  {words[name]:24s} {new[name] / wall[name]:6.1f} tokens/s  tau {new[name] / forwards[name]:.3f}"
                  f"  speedup {wall['vanilla'] / wall[name]:.3f}x")


if __name__ == "__main__":
    main()
