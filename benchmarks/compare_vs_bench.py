"""The Compare tab against the benchmark: on the same prompts, with the same tree and
runtime, every drafter's tau from the app's comparison (app.compare.run, the tab's
and /compare's code path) must equal the one ``python -m gumiho.bench`` measures.
tau counts target forwards, which greedy decoding fixes: the two must agree exactly.

    python benchmarks/compare_vs_bench.py                       # the first 10 MT-Bench prompts, 64 tokens
    python benchmarks/compare_vs_bench.py --limit 2 --max-new-tokens 24

Runs the bench as its command (float32 torch runtime, the device's fixed tree), then
the comparison on each prompt; prints both taus per drafter and exits 1 on a difference."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
KINDS = ("gumiho", "serial", "parallel", "eagle3")


def bench_taus(prompts: str, limit: int, max_new_tokens: int) -> dict:
    """Each method's tau as the bench command measures it (sum of new tokens over sum
    of target forwards over the prompts)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        subprocess.run([sys.executable, "-m", "gumiho.bench", "--prompts", prompts, "--limit", str(limit),
                        "--first-n", "--max-new-tokens", str(max_new_tokens), "--methods",
                        "vanilla," + ",".join(KINDS), "--runtime", "torch", "--warmup", "0", "--no-progress",
                        "--out", out], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            record = json.load(f)
    return {m: record["methods"][m]["tau"] for m in KINDS}, [p["question_id"] for p in record["per_prompt"]]


def compare_taus(prompts: str, limit: int, max_new_tokens: int) -> dict:
    """Each drafter's tau over the same prompts, from the app's comparison."""
    from app.compare.run import CompareForm, compute_compare, parse_compare
    from app.models.hub import ModelHub
    from gumiho.bench.prompt_sets import load_prompts
    from gumiho.loading import load_target

    hub = ModelHub(default_loader=lambda: load_target(None, runtime="torch"), warmup=False).start()
    hub.wait_ready()
    if not hub.ready:
        raise SystemExit(f"the default model did not load: {hub.error}")
    tokens = {m: 0 for m in KINDS}
    forwards = {m: 0 for m in KINDS}
    for p in load_prompts(prompts, limit, spread=False):
        req = parse_compare(CompareForm(prompt=p.text, max_new_tokens=max_new_tokens))
        cmp = compute_compare(hub, req, threading.Event())
        for c in cmp.drafters:
            if not c.same_as_vanilla:
                raise SystemExit(f"{c.method}'s text differs from vanilla's on {p.text[:60]!r}")
            tokens[c.method] += c.stats.new_tokens
            forwards[c.method] += c.stats.target_forwards
    return {m: round(tokens[m] / forwards[m], 4) for m in KINDS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=os.path.join(ROOT, "benchmarks", "prompts", "mt_bench.jsonl"))
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    bench, ids = bench_taus(args.prompts, args.limit, args.max_new_tokens)
    app = compare_taus(args.prompts, args.limit, args.max_new_tokens)
    print(f"prompts: {os.path.basename(args.prompts)} {ids}, {args.max_new_tokens} new tokens, float32 torch runtime")
    print(f"{'drafter':10s} {'bench tau':>10s} {'compare tau':>12s}")
    for m in KINDS:
        print(f"{m:10s} {bench[m]:10.4f} {app[m]:12.4f}{'' if bench[m] == app[m] else '   DIFFERENT'}")
    same = all(bench[m] == app[m] for m in KINDS)
    print("every tau equal" if same else "taus differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
