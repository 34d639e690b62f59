"""Where a speculative step's time goes on the llama.cpp runtime: the drafter's share
beside the target's verify forward, for chains of 1-3 drafted tokens, on each 4-bit
file (gumiho.runtimes.llamacpp_files), against a vanilla step; with the drafter in bfloat16
and with its 4-bit products (gumiho.kernels.int4linear, the default beside this runtime where
the CPU takes them), interleaved prompt by prompt.

    python research/runtime_step.py --prompts benchmarks/prompts/mt_bench.jsonl --limit 4

Parts of a step, timed around the decode loop's own functions (gumiho.engine.decode):
  draft    the proposer's tree (the drafter's Transformer for serial positions 2+, its heads)
  verify   the target's forward over the root and the drafted tokens
  commit   the cache keeps the accepted path and the drafter reads the accepted
           positions' states (its Transformer over them: its first guess for the next step)
Means per step over every step of every prompt; tau = new tokens per step. The last
column is the wall time per new token over vanilla's: below 1.00 drafting pays.
"""
import argparse
import os
import statistics
import time

import torch

import gumiho.engine.decode as decode
from gumiho import GenerationSettings, generate
from gumiho.bench.prompt_sets import load_prompts, prompt_ids
from gumiho.files import LibraryPaths, configure
from gumiho.loading import load_drafter, load_target, shipped_drafter_path
from gumiho.tree import TreeSettings


def chain(n: int) -> TreeSettings:
    return TreeSettings(total_tokens=n, depth=n, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
                        full_tree_tokens=0)


class PartTimer:
    """Wraps decode.verify and decode.commit (stream looks them up at each call) to time them."""

    def __init__(self):
        self.times = {"verify": [], "commit": []}
        for part in self.times:
            original = getattr(decode, part)
            setattr(decode, part, self._timed(part, original))

    def _timed(self, part, fn):
        def run(*args):
            t0 = time.perf_counter()
            out = fn(*args)
            self.times[part].append(time.perf_counter() - t0)
            return out
        return run

    def clear(self):
        for v in self.times.values():
            v.clear()


def main():
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layouts", default="q4_1,q4_0")
    ap.add_argument("--drafter-dtypes", default="bf16,int4", help="gumiho.loading.DRAFTER_DTYPES, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    timer = PartTimer()
    for layout in args.layouts.split(","):
        target = load_target(runtime="llama.cpp", layout=layout)
        drafters = {d: load_drafter(shipped_drafter_path("gumiho"), target, dtype=d)
                    for d in args.drafter_dtypes.split(",")}
        ids = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
        print(f"{target.runtime.describe()}, {len(ids)} prompts of {args.prompts}, {args.max_new_tokens} new tokens, "
              f"{args.threads} threads")
        runs = [("vanilla", None, None)] + [(f"chain of {n}, {d.precision}", d, chain(n))
                                            for d in drafters.values() for n in (1, 2, 3)]
        for _, proposer, tree in runs:  # first calls off the clock
            generate(target, prompt_ids=ids[0][:32], drafter=proposer,
                     settings=GenerationSettings(max_new_tokens=4, tree=tree))
        parts = {name: {"draft": [], "verify": [], "commit": [], "tokens": 0, "steps": 0} for name, _, _ in runs}
        for p in ids:  # every run on one prompt before the next prompt
            for name, proposer, tree in runs:
                timer.clear()
                r = generate(target, prompt_ids=p, drafter=proposer,
                             settings=GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree))
                got = parts[name]
                got["draft"] += [s.draft_s for s in r.steps[1:]]
                got["verify"] += timer.times["verify"]
                got["commit"] += timer.times["commit"]
                got["tokens"] += sum(len(s.tokens) for s in r.steps[1:])
                got["steps"] += len(r.steps) - 1
        per_token = {}
        for name, proposer, _ in runs:
            got = parts[name]
            ms = {k: 1e3 * statistics.mean(got[k]) for k in ("draft", "verify", "commit")}
            step, tau = sum(ms.values()), got["tokens"] / got["steps"]
            per_token[name] = step / tau
            print(f"  {name:37s} draft {ms['draft']:5.2f} ms  verify {ms['verify']:5.2f} ms  commit {ms['commit']:5.2f} ms"
                  f"  step {step:5.2f} ms  tau {tau:.2f}  drafter's share of the step "
                  f"{(step - ms['verify'] - (0 if proposer else ms['commit'])) / step:.0%}"
                  f"  time per token / vanilla's {per_token[name] / per_token['vanilla']:.2f}")


if __name__ == "__main__":
    main()
