"""The shape of the draft trees each shipped drafter builds while decoding a prompt set.

Decodes the prompts greedily with every drafter kind (the trees the device's default
settings give, as the bench uses them) and prints, per kind, the mean number of tree
nodes at each draft position and the share of verify steps that accepted at least one
drafted token (acc@1, as in BENCHMARKS.md). Two drafters with the same acc@1 can get it
from different trees: a tree with more candidates at position 1 accepts there more
often even with the same top-1 agreement, so this tells tree shape from drafter quality.

    python scripts/tree_shape.py --prompts benchmarks/prompts/mt_bench.jsonl --limit 10
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gumiho import GenerationSettings, load_drafter, load_target, shipped_drafter_path, stream  # noqa: E402
from gumiho.bench import _prompt_ids, load_prompts  # noqa: E402
from gumiho.metrics import summarize  # noqa: E402


def tree_shape(target, drafter, prompts, max_new_tokens: int, depth: int) -> dict:
    nodes = collections.Counter()
    events = []
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    for p in prompts:
        for ev in stream(target, _prompt_ids(target, p), drafter, settings, keep_trees=True):
            events.append(ev)
            if ev.tree is not None:  # a verify step (the prefill has no tree)
                nodes.update(d for d in ev.tree.depths if d > 0)
    stats = summarize(events, depth)
    steps = stats.verify_steps
    return {"verify_steps": steps,
            "nodes_by_position": [round(nodes[d] / max(steps, 1), 2) for d in range(1, depth + 1)],
            "acc_at_1": round(stats.acceptance_by_position(1)[0], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="benchmark prompt file (.jsonl)")
    ap.add_argument("--limit", type=int, default=10, help="as the bench's --limit")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--kinds", default="gumiho,serial,parallel")
    args = ap.parse_args(argv)
    target = load_target()
    prompts = load_prompts(args.prompts, limit=args.limit)
    for kind in args.kinds.split(","):
        drafter = load_drafter(shipped_drafter_path(kind), target)
        shape = tree_shape(target, drafter, prompts, args.max_new_tokens, drafter.cfg.max_depth)
        print(kind, shape, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
