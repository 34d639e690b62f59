"""A guard on what the shipped drafters accept, so that a change that drafts worse
fails in CI, not in a benchmark weeks later (tests/bench/test_acceptance_guard.py).

Each shipped drafter decodes a fixed prompt set (the first MT-Bench prompts of
benchmarks/prompts) greedily on the default model's float32 (torch) runtime, as a
chain of :data:`DEPTH` drafted tokens: every position its heads cover is drafted at
every step, so each head's acceptance is measured. Per drafter it records the mean
accepted length (tokens a verify step yields: accepted drafts plus the target's own,
vLLM's "mean acceptance length") and the acceptance by position (the share of verify
steps that accepted d or more drafts).

The check is vLLM's (tests/v1/spec_decode/test_acceptance_length.py there): the mean
within :data:`MEAN_RTOL` of the baseline, and each position at least
``(1 - POSITION_RTOL)`` of its own baseline. The position tolerance is wider than
vLLM's because a baseline of a few hundred verify steps measures a late position's
share to a few hundredths, and a greedy text may part at a near-tie where another
CPU's kernels round differently.

    python -m gumiho.bench.acceptance --out benchmarks/acceptance_baseline.json   # record the baseline
    python -m gumiho.bench.acceptance --check benchmarks/acceptance_baseline.json # measure and compare
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

from ..engine.decode import GenerationSettings, stream
from ..engine.metrics import summarize
from ..errors import GumihoError
from ..files import LibraryPaths, configure
from ..files.prompt_files import read_prompts
from ..tree import TreeSettings

DEPTH = 7
CHAIN = TreeSettings(total_tokens=DEPTH, depth=DEPTH, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
                     full_tree_tokens=0)
KINDS = ("gumiho", "serial", "parallel", "eagle3")
PROMPT_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "benchmarks", "prompts", "mt_bench.jsonl")
PROMPTS = 8
# 24 new tokens a prompt (48 until the suite's budget): eight prompts kept for their
# variety, about 120 verify steps a drafter, and half the guard's minutes.
MAX_NEW_TOKENS = 24
MEAN_RTOL = 0.05
POSITION_RTOL = 0.25
POSITION_FLOOR = 0.05  # positions whose baseline share is below this are too rare to hold to a ratio


def prompts(path: str = PROMPT_FILE, n: int = PROMPTS) -> list[str]:
    return [c.user_turns[0] for c in read_prompts(path)[:n]]


def measure(target, drafters: dict, texts: list[str], max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """Per drafter (``{name: drafter}``), over ``texts`` decoded greedily as a chain of
    DEPTH: verify steps, mean accepted length and acceptance by position."""
    out = {}
    settings = GenerationSettings(max_new_tokens=max_new_tokens, tree=CHAIN)
    for name, drafter in drafters.items():
        steps = [ev for text in texts for ev in stream(target, target.encode(text), drafter, settings)]
        st = summarize(steps, DEPTH)
        verify = [ev for ev in steps if ev.step > 0 and ev.drafted > 0]
        out[name] = {"verify_steps": len(verify),
                     "mean_accepted_length": round(sum(ev.accepted_length + 1 for ev in verify) / max(1, len(verify)),
                                                   4),
                     "acceptance_by_position": [round(a, 4) for a in st.acceptance_by_position(DEPTH)]}
    return out


def compare(measured: dict, baseline: dict) -> list[str]:
    """What falls outside the tolerances (empty: nothing), one line per finding."""
    problems = []
    for name, base in baseline.items():
        got = measured.get(name)
        if got is None:
            problems.append(f"{name}: not measured")
            continue
        mean, want = got["mean_accepted_length"], base["mean_accepted_length"]
        if abs(mean - want) > MEAN_RTOL * want:
            problems.append(f"{name}: mean accepted length {mean:.3f}, baseline {want:.3f} (+-{MEAN_RTOL:.0%})")
        for d, (a, b) in enumerate(zip(got["acceptance_by_position"], base["acceptance_by_position"]), start=1):
            if b >= POSITION_FLOOR and a < (1 - POSITION_RTOL) * b:
                problems.append(f"{name}: acceptance at position {d} {a:.3f}, baseline {b:.3f} "
                                f"(at least {1 - POSITION_RTOL:.0%} of it)")
    return problems


def shipped_drafters(target, kinds=KINDS) -> dict:
    from ..loading import load_drafter, shipped_drafter_path

    out = {}
    for kind in kinds:
        path = shipped_drafter_path(kind)
        if path is None:
            raise GumihoError(f"The shipped {kind} drafter is missing (assets/drafters/smollm2-135m-{kind}).")
        out[kind] = load_drafter(path, target)
    return out


def main(argv: Optional[list[str]] = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(prog="python -m gumiho.bench.acceptance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the measured record here (a new baseline)")
    ap.add_argument("--check", help="compare with this baseline; exit 1 outside the tolerances")
    args = ap.parse_args(argv)
    from ..loading import load_target

    try:
        target = load_target(None, runtime="torch")
        record = {"prompts": f"{os.path.basename(PROMPT_FILE)}, first {PROMPTS}", "max_new_tokens": MAX_NEW_TOKENS,
                  "tree": f"a chain of {DEPTH}", "runtime": "torch, float32",
                  "drafters": measure(target, shipped_drafters(target), prompts())}
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(record["drafters"], indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.check:
        with open(args.check, encoding="utf-8") as f:
            problems = compare(record["drafters"], json.load(f)["drafters"])
        print("\n".join(problems) or "within the tolerances")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
