"""Is one drafter's tau really above another's? A paired comparison over prompts.

Ten prompts decide a table row by a few target forwards; this script asks how
sure such a verdict is. It reads `python -m gumiho.bench` records (any number of
sets, each run with the methods to compare) and, for each set and each ablation,
prints both taus, the difference, and a 95% bootstrap interval of the difference
over prompts.

Why paired: every method decodes the same prompts (at temperature 0 to the same
text, since decoding is lossless), so what varies is how many target forwards each
drafter needed on each one, and prompts that are easy for one drafter are easy for
the other. Resampling prompts with replacement and taking
tau = sum(new tokens) / sum(target forwards) for both drafters on the same
resample keeps that pairing: the interval is for the difference in tau over the
kind of prompts the set holds, not for either tau alone.

    python -m gumiho.bench.compare_drafters benchmarks/all80/*.json

``--speedup`` asks the same of a timed record (one run with vanilla): each method's
speedup, vanilla wall time / the method's wall time summed over the same prompts
(the bench's figure), with a 95% bootstrap interval over prompts. Where the two
wrote different numbers of tokens on some prompt (sampling), it is the ratio of
tokens per second instead (gumiho.engine.metrics.speedup), and the table says so. The interval is
for this machine in this run: it covers which prompts were drawn, and the timing
noise of each prompt's run, not another machine or another day.

    python -m gumiho.bench.compare_drafters --speedup benchmarks/all80/timed/mt_bench.json
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

from ..engine.metrics import SPEEDUP_THROUGHPUT, speedup, speedup_kind
from ..files import LibraryPaths, configure
from .records import load, speedup_pairs  # records in table order, with their set names

# What --method is compared with by default: the two ablations, and the one-layer
# EAGLE-2 baseline where every record ran it (records from before it have none).
DEFAULT_AGAINST = ("serial", "parallel")
OPTIONAL_AGAINST = ("eagle",)


def default_against(paths, method: str = "gumiho", held_only: bool = False) -> tuple:
    """DEFAULT_AGAINST, plus those of OPTIONAL_AGAINST that every record of ``paths``
    holds, less ``method`` itself. ``held_only``: DEFAULT_AGAINST too only where every
    record holds it (a speedup needs no second drafter)."""
    records = [rec for _, _, rec in load(paths)]

    def held(m):
        return records and all(m in rec["methods"] for rec in records)
    wanted = tuple(m for m in DEFAULT_AGAINST if not held_only or held(m)) + tuple(filter(held, OPTIONAL_AGAINST))
    return tuple(m for m in wanted if m != method)


def paired_counts(record: dict, a: str, b: str) -> list[tuple[int, int, int, int]]:
    """(new tokens of a, forwards of a, new tokens of b, forwards of b) per prompt that
    both methods ran. Greedy decoding gives both the same text, so the same token count;
    a sampled run need not, and each method's tau then counts its own tokens."""
    rows = []
    for p in record["per_prompt"]:
        m = p["methods"]
        if a in m and b in m:
            rows.append((m[a]["new_tokens"], m[a]["target_forwards"], m[b]["new_tokens"], m[b]["target_forwards"]))
    return rows


def bootstrap(rows, statistic, resamples: int = 10000, seed: int = 0):
    """``statistic(rows)``, and its 2.5% / 97.5% quantiles over ``resamples`` resamples
    of the rows (prompts) with replacement."""
    rng = random.Random(seed)
    n = len(rows)
    boots = sorted(statistic([rows[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    return statistic(rows), boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]


def tau_difference(rows, resamples: int = 10000, seed: int = 0):
    """tau(a) - tau(b) on the rows of paired_counts, with its bootstrap interval."""
    return bootstrap(rows, lambda sample: (sum(r[0] for r in sample) / sum(r[1] for r in sample)
                                           - sum(r[2] for r in sample) / sum(r[3] for r in sample)),
                     resamples, seed)


def speedup_interval(rows, resamples: int = 10000, seed: int = 0, kind: str | None = None):
    """The speedup over the rows of records.speedup_pairs (of ``kind``, by default
    as gumiho.engine.metrics.speedup_kind decides on all the rows, so that every resample
    takes the same kind of ratio), with its bootstrap interval."""
    kind = kind or speedup_kind(rows)
    return bootstrap(rows, lambda sample: speedup(sample, kind), resamples, seed)


def speedups(paths, methods=None, resamples: int = 10000) -> str:
    """Each method's speedup table (default: gumiho and default_against's methods)."""
    methods = methods or ("gumiho", *default_against(paths))
    lines = ["| set | prompts | " + " | ".join(f"{m} speedup (95% interval)" for m in methods) + " |",
             "|" + "---|" * (2 + len(methods))]
    throughputs = 0
    for name, stem, record in load(paths):
        missing = [m for m in ("vanilla", *methods) if m not in record["methods"]]
        if missing:
            raise SystemExit(f"{stem}.json: no {', '.join(missing)} in this record; a speedup needs a timed run "
                             f"with --methods vanilla,{','.join(methods)}")
        cells, n = [], 0
        for m in methods:
            rows = speedup_pairs(record, m)
            n = len(rows)
            kind = speedup_kind(rows)
            throughputs += kind == SPEEDUP_THROUGHPUT
            r, lo, hi = speedup_interval(rows, resamples, kind=kind)
            cells.append(f"{r:.2f}x ({lo:.2f}x to {hi:.2f}x)"
                         + (f", {SPEEDUP_THROUGHPUT}" if kind == SPEEDUP_THROUGHPUT else ""))
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("speedup = vanilla wall time / method wall time, summed over the prompts"
                 + (" (both wrote the same tokens on every prompt)." if not throughputs else
                    "; marked throughput: method tokens/s / vanilla tokens/s, where the two wrote different "
                    "numbers of tokens on some prompt (sampling), so wall times are not compared."))
    return "\n".join(lines)


def compare(paths, method: str = "gumiho", others=None, resamples: int = 10000) -> str:
    """The paired tau comparison of ``method`` with ``others`` (default: default_against's)."""
    others = others or default_against(paths, method)
    lines = [f"| set | prompts | {method} tau | " + " | ".join(
        f"{o} tau | {method} - {o} (95% interval)" for o in others) + " |",
        "|" + "---|" * (3 + 2 * len(others))]
    above = sure = 0
    total = 0
    for name, stem, record in load(paths):
        missing = [m for m in (method, *others) if m not in record["methods"]]
        if missing:
            raise SystemExit(f"{stem}.json: no {', '.join(missing)} in this record; run the bench with "
                             f"--methods {','.join((method, *others))}")
        cells, lows, diffs = [], [], []
        n = 0
        for o in others:
            rows = paired_counts(record, method, o)
            n = len(rows)
            d, lo, hi = tau_difference(rows, resamples)
            diffs.append(d)
            lows.append(lo)
            cells += [f"{record['methods'][o]['tau']:.2f}", f"{d:+.3f} ({lo:+.3f} to {hi:+.3f})"]
        total += 1
        above += all(d > 0 for d in diffs)
        sure += all(lo > 0 for lo in lows)
        lines.append(f"| {name} | {n} | {record['methods'][method]['tau']:.2f} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{method}'s tau is above every other method's on {above} of {total} sets; "
                 f"the whole 95% interval of the difference is above 0 on {sure} of {total}.")
    return "\n".join(lines)


def main(argv=None):
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.compare_drafters",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", help="bench JSON files (python -m gumiho.bench --out)")
    ap.add_argument("--method", default="gumiho", help="the drafter to test (default gumiho)")
    ap.add_argument("--against", default=None,
                    help="comma-separated methods to compare with (default: serial,parallel, and eagle where every "
                         "record ran it)")
    ap.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default 10000)")
    ap.add_argument("--speedup", action="store_true",
                    help="instead: each method's speedup over vanilla with its 95%% interval (timed records)")
    args = ap.parse_args(argv)
    if args.resamples < 100:
        ap.error("--resamples must be at least 100")
    missing = [p for p in args.records if not Path(p).is_file()]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")
    against = (tuple(a.strip() for a in args.against.split(",") if a.strip()) if args.against is not None
               else default_against(args.records, args.method, held_only=args.speedup))
    if args.speedup:
        print(speedups(args.records, tuple(dict.fromkeys((args.method, *against))), args.resamples))
        return
    if not against or args.method in against:
        ap.error("--against must name at least one method other than --method")
    print(compare(args.records, args.method, against, args.resamples))


if __name__ == "__main__":
    sys.exit(main())
