"""The Compare tab's figures for a few prompts, printed: what the tab shows (its table and its
sentences), through the same code (app.compare.run, app.compare.summary).

    python benchmarks/compare_prompts.py                      # three everyday prompts, the race's tree
    python benchmarks/compare_prompts.py --paper "Why is the sky blue?"
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Everyday requests written for this script (not from a bench set).
EVERYDAY = ("Write a short thank-you note to a neighbour who watered my plants.",
            "Explain in a few sentences why the sky is blue.",
            "Give me three tips for a first job interview.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("prompts", nargs="*", default=list(EVERYDAY))
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--paper", action="store_true", help="the paper's tree instead of the race's")
    ap.add_argument("--copy", action="store_true", help="also copying alone and Gumiho with copying")
    args = ap.parse_args(argv)

    from app.compare.run import CompareForm, compute_compare, parse_compare
    from app.compare.summary import compare_summary
    from app.models.hub import ModelHub

    hub = ModelHub(warmup=False).start()  # the default model as the app loads it
    hub.wait_ready()
    if not hub.ready:
        print(f"the default model did not load: {hub.error}")
        return 1
    for prompt in args.prompts:
        form = CompareForm(prompt, args.max_new_tokens, tree_shape="paper" if args.paper else None,
                           copy_alone=args.copy, gumiho_with_copy=args.copy)
        t0 = time.perf_counter()
        cmp = compute_compare(hub, parse_compare(form), threading.Event())
        took = time.perf_counter() - t0
        s = compare_summary(cmp, prompt)
        v = s["vanilla"]
        print(f"\n{prompt!r}: {v['new_tokens']} tokens, {s['runtime']} ({s['weights']}), tree "
              f"{s['tree']['total_tokens']} nodes to depth {s['tree']['depth']}; the comparison took {took:.1f} s")
        print(f"  {'decoder':12s} {'tau':>5s} {'tok/s':>6s} {'speedup':>7s} {'draft ms':>8s} {'verify ms':>9s} "
              f"{'params':>7s}  acceptance by position")
        print(f"  {'vanilla':12s} {v['tau']:5.2f} {v['tokens_per_s']:6.1f} {'':>7s} {v['draft_ms_per_step']:8.1f} "
              f"{v['verify_ms_per_step']:9.1f}")
        for d in s["drafters"]:
            print(f"  {d['method']:12s} {d['tau']:5.2f} {d['tokens_per_s']:6.1f} {d['speedup'] or 0:6.2f}x "
                  f"{d['draft_ms_per_step']:8.1f} {d['verify_ms_per_step']:9.1f} {d['parameters'] / 1e6:6.1f}M  "
                  f"{d['acceptance_by_position']}{'' if d['same_as_vanilla'] else '  TEXT DIFFERS'}")
        for sk in s["skipped"]:
            print(f"  {sk['method']:12s} not run: {sk['reason']}")
        for line in s["findings"]:
            print(f"  - {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
