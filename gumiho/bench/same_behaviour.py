"""Did a change keep the engine's behaviour? Two directories of bench records of the
same prompts and settings (one made before the change, one after), compared on
everything that does not depend on the clock.

Per prompt and method: new tokens, target forwards, finish reason and, for greedy
records, whether the text was identical to vanilla's. Per method: tau, acceptance by
position, who proposed the accepted tokens, and the lossless verdict. Wall times and
speedups are left out: they measure the machine, not the code.

Greedy decoding gives one text per prompt, so equal counts with every method
identical to vanilla in both records (transformers' ``generate`` among them, whose
code no change here touches) mean the same tokens before and after. A sampled record
run with the same seed must give the same counts as well.

    python -m gumiho.bench.same_behaviour BEFORE_DIR AFTER_DIR

benchmarks/refactor_check.sh makes both directories from two revisions of the
repository. Exit status 0 when every record matches, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..files import LibraryPaths, configure

PER_PROMPT_KEYS = ("new_tokens", "target_forwards", "finish_reason", "identical")
PER_METHOD_KEYS = ("new_tokens", "target_forwards", "tau", "acceptance_by_position", "accepted_by_proposer",
                   "verify_steps", "mean_drafted", "copy_nodes")


def _rounded(value):
    """Floats to 6 places (JSON round trips), lists and dicts alike."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def differences(before: dict, after: dict) -> list[str]:
    """Every clock-independent field on which two bench records disagree."""
    out = []
    methods_b, methods_a = before["methods"], after["methods"]
    if set(methods_b) != set(methods_a):
        out.append(f"methods: {sorted(methods_b)} before, {sorted(methods_a)} after")
    for name in sorted(set(methods_b) & set(methods_a)):
        for key in PER_METHOD_KEYS:
            b, a = _rounded(methods_b[name].get(key)), _rounded(methods_a[name].get(key))
            if b != a:
                out.append(f"{name} {key}: {b} before, {a} after")
    ids_b = [p["question_id"] for p in before["per_prompt"]]
    ids_a = [p["question_id"] for p in after["per_prompt"]]
    if ids_b != ids_a:
        return out + [f"prompts: {ids_b} before, {ids_a} after"]
    for pb, pa in zip(before["per_prompt"], after["per_prompt"]):
        for name in sorted(set(pb["methods"]) & set(pa["methods"])):
            for key in PER_PROMPT_KEYS:
                b, a = pb["methods"][name].get(key), pa["methods"][name].get(key)
                if b != a:
                    out.append(f"prompt {pb['question_id']} {name} {key}: {b} before, {a} after")
    if before.get("lossless") != after.get("lossless"):
        out.append(f"lossless: {before.get('lossless')} before, {after.get('lossless')} after")
    return out


def compare_dirs(before: Path, after: Path) -> tuple[list[str], int]:
    """(lines to print, number of records that differ) for the records of both folders."""
    lines, bad = [], 0
    names = sorted(p.name for p in before.glob("*.json"))
    if not names:
        return [f"no records (*.json) in {before}"], 1
    for name in names:
        if not (after / name).exists():
            lines.append(f"{name}: missing after")
            bad += 1
            continue
        rec_b, rec_a = (json.loads((d / name).read_text()) for d in (before, after))
        diff = differences(rec_b, rec_a)
        bad += bool(diff)
        taus = ", ".join(f"{m} {rec_a['methods'][m]['tau']:.3f}" for m in rec_a["methods"])
        n = len(rec_a["per_prompt"])
        lines.append(f"{name}: {'same' if not diff else 'DIFFERENT'} ({n} prompts; tau {taus})")
        lines += [f"  {d}" for d in diff]
    return lines, bad


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, help="folder of records made before the change")
    ap.add_argument("after", type=Path, help="folder of records of the same names made after it")
    args = ap.parse_args(argv)
    lines, bad = compare_dirs(args.before, args.after)
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
