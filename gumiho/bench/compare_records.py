"""Is a new drafter's tau really above an old one's? The same method in two bench
records of the same prompts (one run with each drafter), paired prompt by prompt.

gumiho.bench.compare_drafters pairs methods inside one record; a retrained drafter of
the same kind runs as the same method, so its record is a second file. Greedy decoding
gives both runs the same text, so per prompt only the target forwards differ; the 95%
interval is a bootstrap over prompts (compare_drafters.tau_difference).

    python -m gumiho.bench.compare_records --old OLD_DIR --new NEW_DIR [--methods gumiho,serial,parallel]

OLD_DIR and NEW_DIR hold records of the same names (mt_bench.json, ...), as
benchmarks/run_benchmarks.sh writes them. With two sets or more, a last line per method
pools the prompts of every set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..files import LibraryPaths, configure
from .compare_drafters import tau_difference
from .methods import DRAFTER_METHODS


def per_prompt(record: dict, method: str) -> dict:
    """question id -> (new tokens, target forwards) of ``method``."""
    return {p["question_id"]: (p["methods"][method]["new_tokens"], p["methods"][method]["target_forwards"])
            for p in record["per_prompt"] if method in p["methods"]}


def compare(old: Path, new: Path, methods: list[str], resamples: int = 10000) -> str:
    lines = ["| set | method | prompts | old tau | new tau | new - old (95% interval) |",
             "|---|---|---|---|---|---|"]
    up = sure = total = 0
    by_set: dict[str, list] = {}  # method -> each set's rows, for the "all sets" line
    for path in sorted(new.glob("*.json")):
        if not (old / path.name).exists():
            continue
        a, b = json.loads((old / path.name).read_text()), json.loads(path.read_text())
        for m in methods:
            if m not in a["methods"] or m not in b["methods"]:
                continue
            pa, pb = per_prompt(a, m), per_prompt(b, m)
            rows = [(*pb[q], *pa[q]) for q in pb if q in pa]
            if not rows:
                continue
            by_set.setdefault(m, []).append(rows)
            d, lo, hi = tau_difference(rows, resamples)
            total += 1
            up += d > 0
            sure += lo > 0
            lines.append(f"| {path.stem} | {m} | {len(rows)} | {a['methods'][m]['tau']:.3f} | "
                         f"{b['methods'][m]['tau']:.3f} | {d:+.3f} ({lo:+.3f} to {hi:+.3f}) |")
    # All sets together: one tau over every prompt of every set, the bootstrap
    # resampling prompts from the pool (sets weigh by their prompts and tokens).
    for m, sets in by_set.items():
        if len(sets) < 2:
            continue
        rows = [r for set_rows in sets for r in set_rows]
        d, lo, hi = tau_difference(rows, resamples)
        old_tau = sum(r[2] for r in rows) / sum(r[3] for r in rows)
        new_tau = sum(r[0] for r in rows) / sum(r[1] for r in rows)
        lines.append(f"| all sets | {m} | {len(rows)} | {old_tau:.3f} | {new_tau:.3f} | {d:+.3f} ({lo:+.3f} to {hi:+.3f}) |")
    lines += ["", f"new above old in {up} of {total} (set, method) pairs; the whole interval above 0 in {sure}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.compare_records",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, type=Path)
    ap.add_argument("--new", required=True, type=Path)
    ap.add_argument("--methods", default=",".join(DRAFTER_METHODS))  # every learned drafter's method
    ap.add_argument("--resamples", type=int, default=10000)
    args = ap.parse_args(argv)
    for d in (args.old, args.new):
        if not d.is_dir():
            ap.error(f"no such folder: {d}")
    print(compare(args.old, args.new, [m for m in args.methods.split(",") if m], args.resamples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
