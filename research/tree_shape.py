"""The shape of the draft trees each shipped drafter builds while decoding a prompt set.

Decodes the prompts greedily with every drafter kind (the trees the device's default
settings give, as the bench uses them) and prints, per kind, the mean number of tree
nodes at each draft position and the share of verify steps that accepted at least one
drafted token (acc@1, as in BENCHMARKS.md). Two drafters with the same acc@1 can get it
from different trees: a tree with more candidates at position 1 accepts there more
often even with the same top-1 agreement, so this tells tree shape from drafter quality.

``--calibration`` also asks whether the drafter's probabilities can be taken at their
word, which is what the dynamic tree does when it keeps the candidates of highest
cumulative probability: of the candidates the target got to judge (a child of the
root or of an accepted node), the share it accepted, next to their mean drafter
probability (the conditional one, given the path above), per position and per
probability band. Equal figures mean a calibrated drafter, for which re-weighting
the scores cannot choose better nodes.

    python research/tree_shape.py --prompts benchmarks/prompts/mt_bench.jsonl --limit 10
    python research/tree_shape.py --prompts benchmarks/prompts/mt_bench.jsonl --kinds gumiho --calibration
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

from gumiho import GenerationSettings, load_drafter, load_target, shipped_drafter_path, stream
from gumiho.bench import load_prompts, prompt_ids
from gumiho.engine.metrics import summarize
from gumiho.files import LibraryPaths, configure

BANDS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def judged_candidates(event) -> list[tuple[int, float, bool]]:
    """(position, drafter probability, accepted) of every node of a verify step's tree
    that the target judged: a child of the root or of an accepted node."""
    tree, path = event.tree, set(event.accepted_nodes)
    return [(tree.depths[i], tree.probs[i], i in path) for i in range(1, len(tree))
            if tree.parents[i] == 0 or tree.parents[i] in path]


def calibration(judged) -> dict:
    """Per position and per probability band: candidates judged, their mean drafter
    probability and the share accepted."""
    def row(items):
        n = len(items)
        return {"judged": n, "mean_prob": round(sum(p for _, p, _ in items) / n, 3),
                "accepted": round(sum(a for _, _, a in items) / n, 3)}

    by_position = collections.defaultdict(list)
    by_band = collections.defaultdict(list)
    for d, p, a in judged:
        by_position[d].append((d, p, a))
        band = min(int(p * (len(BANDS) - 1)), len(BANDS) - 2)
        by_band[f"{BANDS[band]:.1f}-{BANDS[band + 1]:.1f}"].append((d, p, a))
    return {"by_position": {d: row(v) for d, v in sorted(by_position.items())},
            "by_probability": {b: row(v) for b, v in sorted(by_band.items())}}


def tree_shape(target, drafter, prompts, max_new_tokens: int, depth: int, with_calibration: bool = False) -> dict:
    nodes = collections.Counter()
    events = []
    judged = []
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    for p in prompts:
        for ev in stream(target, prompt_ids(target, p), drafter, settings, keep_trees=True):
            events.append(ev)
            if ev.tree is not None:  # a verify step (the prefill has no tree)
                nodes.update(d for d in ev.tree.depths if d > 0)
                judged += judged_candidates(ev)
    stats = summarize(events, depth)
    steps = stats.verify_steps
    out = {"verify_steps": steps,
           "nodes_by_position": [round(nodes[d] / max(steps, 1), 2) for d in range(1, depth + 1)],
           "acc_at_1": round(stats.acceptance_by_position(1)[0], 2)}
    if with_calibration:
        out["calibration"] = calibration(judged)
    return out


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="benchmark prompt file (.jsonl)")
    ap.add_argument("--limit", type=int, default=10, help="as the bench's --limit")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--kinds", default="gumiho,serial,parallel")
    ap.add_argument("--calibration", action="store_true",
                    help="also compare the drafter's probabilities with how often the target accepted")
    args = ap.parse_args(argv)
    target = load_target()
    prompts = load_prompts(args.prompts, limit=args.limit)
    for kind in args.kinds.split(","):
        drafter = load_drafter(shipped_drafter_path(kind), target)
        shape = tree_shape(target, drafter, prompts, args.max_new_tokens, drafter.cfg.max_depth, args.calibration)
        print(kind, shape, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
