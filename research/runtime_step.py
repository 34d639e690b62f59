"""Where a speculative step's time goes on the llama.cpp runtime: the drafter's share
beside the target's verify forward, for chains of 1-3 drafted tokens, on each 4-bit
file (gumiho.runtimes.layouts), against a vanilla step.

    python research/runtime_step.py --prompts benchmarks/prompts/mt_bench.jsonl --limit 4

Parts of a step, timed around the decode loop's own functions (gumiho.decode):
  draft    the proposer's tree (the drafter's Transformer for serial positions 2+, its heads)
  verify   the target's forward over the root and the drafted tokens
  commit   the cache keeps the accepted path and the drafter reads the accepted
           positions' states (its Transformer over them: its first guess for the next step)
Means per step over every step of every prompt; tau = new tokens per step. The last
column is the wall time per new token over vanilla's: below 1.00 drafting pays.
"""
import argparse
import statistics
import time

import torch

import gumiho.decode as decode
from gumiho import GenerationSettings, generate
from gumiho.bench.prompts import load_prompts, prompt_ids
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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="benchmarks/prompts/mt_bench.jsonl")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layouts", default="q4_1,q4_0")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    timer = PartTimer()
    for layout in args.layouts.split(","):
        target = load_target(runtime="llama.cpp", layout=layout)
        drafter = load_drafter(shipped_drafter_path("gumiho"), target)
        ids = [prompt_ids(target, p) for p in load_prompts(args.prompts, args.limit)]
        print(f"{target.runtime.describe()}, drafter {str(drafter.weight_dtype).replace('torch.', '')}, "
              f"{len(ids)} prompts of {args.prompts}, {args.max_new_tokens} new tokens, {args.threads} threads")
        runs = [("vanilla", None, None)] + [(f"chain of {n}", drafter, chain(n)) for n in (1, 2, 3)]
        for _, proposer, tree in runs:  # first calls off the clock
            generate(target, prompt_ids=ids[0][:32], drafter=proposer,
                     settings=GenerationSettings(max_new_tokens=4, tree=tree))
        per_token = {}
        for name, proposer, tree in runs:
            timer.clear()
            draft, tokens, steps = [], 0, 0
            for p in ids:
                r = generate(target, prompt_ids=p, drafter=proposer,
                             settings=GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree))
                draft += [s.draft_s for s in r.steps[1:]]
                tokens += sum(len(s.tokens) for s in r.steps[1:])
                steps += len(r.steps) - 1
            ms = {"draft": 1e3 * statistics.mean(draft), "verify": 1e3 * statistics.mean(timer.times["verify"]),
                  "commit": 1e3 * statistics.mean(timer.times["commit"])}
            step = sum(ms.values())
            per_token[name] = step / (tokens / steps)
            print(f"  {name:11s} draft {ms['draft']:5.2f} ms  verify {ms['verify']:5.2f} ms  commit {ms['commit']:5.2f} ms"
                  f"  step {step:5.2f} ms  tau {tokens / steps:.2f}  drafter's share of the step "
                  f"{(step - ms['verify'] - (0 if proposer else ms['commit'])) / step:.0%}"
                  f"  time per token / vanilla's {per_token[name] / per_token['vanilla']:.2f}")


if __name__ == "__main__":
    main()
