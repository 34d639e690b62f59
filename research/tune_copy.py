"""Sweep the copy proposer's settings beside a drafter: tau (exact, independent of
machine load), the nodes it adds, and the speed they would buy on this machine,
estimated from the target's verify cost per tree size (measured once, before the
sweep) rather than from timings taken while the sweep runs.

    python research/tune_copy.py --prompts benchmarks/prompts/sum.jsonl benchmarks/prompts/qa.jsonl \
        --limit 4 --max-new-tokens 64 --grid 4:2,8:2,8:1,8:2:8:0.2

Estimated time of a run = sum over its target forwards of the measured verify cost
of that forward's tree (root included) + its drafting time; the ratio of two runs'
estimates is what their speedups would be if the drafting and the rest of the loop
cost the same in both (the copy lookup itself costs microseconds).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from gumiho import (
    CopySettings,
    GenerationSettings,
    TreeSettings,
    load_drafter,
    load_target,
    shipped_drafter_path,
    stream,
    summarize,
    with_copy,
)
from gumiho.bench import load_prompts, prompt_ids
from gumiho.engine.verifycost import verify_cost_for
from gumiho.files import LibraryPaths, configure


def parse_grid(text: str) -> list[CopySettings]:
    out = []
    for item in text.split(","):
        parts = [int(x) for x in item.split(":")[:3]] + item.split(":")[3:]
        tokens, min_match = parts[0], parts[1] if len(parts) > 1 else 2
        max_match = parts[2] if len(parts) > 2 else max(8, min_match)
        keep_above = float(item.split(":")[3]) if len(parts) > 3 else CopySettings().keep_above
        out.append(CopySettings(tokens, min_match, max_match, keep_above).validate())
    return out


def label(c: CopySettings) -> str:
    return f"{c.max_tokens}:{c.min_match}:{c.max_match}:{c.keep_above:g}"


def run(target, ids, drafter, gen, cost) -> dict:
    steps = list(stream(target, ids, drafter, gen))
    st = summarize(steps, 16)
    sizes = [s.drafted + 1 for s in steps if s.step > 0]
    hist = [0] * 65
    for n in sizes:
        hist[min(n, 64)] += 1
    return {"tokens": st.new_tokens, "forwards": st.target_forwards, "copy_nodes": st.copy_nodes,
            "copy_accepted": st.accepted_by_head.get("copy", 0), "nodes": sum(sizes),
            "est_s": sum(cost(n) for n in sizes) + st.draft_s, "draft_s": st.draft_s, "size_hist": hist}


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--drafter", default=None, help="drafter folder (default: the shipped gumiho drafter)")
    p.add_argument("--grid", default="4:2,6:2,8:2,6:3,8:3,10:3,8:4",
                   help="copy settings to try, as max_tokens:min_match[:max_match[:keep_above]], comma-separated")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    grid = parse_grid(args.grid)
    target = load_target(None)
    drafter = load_drafter(args.drafter or shipped_drafter_path("gumiho"), target)
    tree = TreeSettings.for_device(target.device)
    most = tree.total_tokens + 1 + max(c.max_tokens for c in grid)
    vc = verify_cost_for(target, most)
    cost = vc.of
    print("verify ms by tree size: " + " ".join(f"{n}:{1000 * cost(n):.1f}" for n in range(1, most + 1)),
          flush=True)
    rows = []
    for path in args.prompts:
        prompts = load_prompts(path, args.limit)
        name = os.path.splitext(os.path.basename(path))[0]
        totals = {"gumiho": {}, **{label(c): {} for c in grid}}
        for i, pr in enumerate(prompts):
            ids = prompt_ids(target, pr)
            gen = GenerationSettings(max_new_tokens=args.max_new_tokens, tree=tree)
            runs = {"gumiho": run(target, ids, drafter, gen, cost)}
            for c in grid:
                runs[label(c)] = run(target, ids, with_copy(drafter, c), gen, cost)
            for k, r in runs.items():
                for f, v in r.items():
                    if isinstance(v, list):
                        old = totals[k].get(f, [0] * len(v))
                        totals[k][f] = [x + y for x, y in zip(old, v)]
                    else:
                        totals[k][f] = totals[k].get(f, 0) + v
        base = totals["gumiho"]
        for k, t in totals.items():
            row = {"set": name, "setting": k, "tau": t["tokens"] / t["forwards"],
                   "nodes_per_step": t["nodes"] / max(1, t["forwards"] - len(prompts)),
                   "copy_nodes": t["copy_nodes"], "copy_accepted": t["copy_accepted"],
                   "est_speed_vs_gumiho": (base["est_s"] / t["est_s"]) * (t["tokens"] / base["tokens"]),
                   "tokens": t["tokens"], "forwards": t["forwards"], "draft_s": t["draft_s"],
                   "size_hist": t["size_hist"]}
            rows.append(row)
            print(f"{name:10s} {k:14s} tau {row['tau']:.3f}  nodes/step {row['nodes_per_step']:.2f}  "
                  f"copy {t['copy_accepted']}/{t['copy_nodes']}  est x{row['est_speed_vs_gumiho']:.3f}",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"verify_ms": [round(1000 * s, 3) for s in vc.seconds], "rows": rows,
                       "max_new_tokens": args.max_new_tokens, "limit": args.limit,
                       "time": time.strftime("%Y-%m-%d")}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
