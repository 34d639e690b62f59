"""Benchmark: the Lossless? tab's experiment (gumiho.lab.lossless) on everyday prompts, with
the engine's acceptance rule and the two wrong ones, through the app's own code (the
default model in float32 with its shipped Gumiho drafter, as the tab runs it).

For each prompt and rule: the chi-square test of one distribution between N vanilla
samples and N speculative samples of the first k tokens, and the seconds it took.
The engine's rule should pass (p above 0.01) everywhere; a wrong rule's drift shows
as p below 0.001 where the drafter's choices differ enough from the target's.

    PYTHONPATH=. python research/lossless_prompts.py --out benchmarks/sampling/lossless_prompts.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from app.lossless.run import LosslessRequest, compute_lossless
from app.lossless.summary import lossless_summary
from app.models.hub import ModelHub
from gumiho.files import LibraryPaths, configure
from gumiho.kernels.machine import cpu_summary
from gumiho.lab.rules import SAMPLING_RULES

PROMPTS = ("Write a haiku about the sea.",
           "What is the capital of France?",
           "Give me three tips for sleeping better.",
           "Explain what a rainbow is to a child.",
           "Write a short thank-you note to a teacher.")


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--rules", default=",".join(SAMPLING_RULES))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    hub = ModelHub(access=None).start()
    hub.wait_ready()
    if not hub.ready:
        print(f"the default model did not load: {hub.error}", file=sys.stderr)
        return 1
    rows = []
    for i, prompt in enumerate(PROMPTS):
        for rule in args.rules.split(","):
            req = LosslessRequest(prompt, args.temperature, args.samples, args.tokens, rule, seed=i)
            t0 = time.perf_counter()
            answer = lossless_summary(hub.submit(lambda: compute_lossless(hub, req, threading.Event())).result())
            rows.append({k: answer[k] for k in ("prompt", "rule", "samples", "tokens", "temperature", "chi2", "dof",
                                                "p_value", "pooled", "sequences", "seconds")}
                        | {"wall_s": round(time.perf_counter() - t0, 1)})
            r = rows[-1]
            print(f"{i} {rule:<12} p={r['p_value']:.3g} chi2={r['chi2']:.1f} dof={r['dof']} pooled={r['pooled']} "
                  f"seqs={r['sequences']} {r['seconds']:.1f} s", flush=True)
    lines = [f"lossless check: {args.samples} samples of {args.tokens} tokens each way, temperature "
             f"{args.temperature}; {cpu_summary()}",
             f"{'prompt':<45} {'rule':<12} {'p-value':>9} {'chi2':>7} {'dof':>4} {'s':>6}"]
    for r in rows:
        lines.append(f"{r['prompt'][:44]:<45} {r['rule']:<12} {r['p_value']:9.3g} {r['chi2']:7.1f} {r['dof']:4d} "
                     f"{r['seconds']:6.1f}")
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": vars(args), "cpu": cpu_summary(), "runs": rows}, indent=1))
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
