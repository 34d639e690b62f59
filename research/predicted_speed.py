"""Benchmark: the speedup predicted from a race's acceptance and step costs
(gumiho.lab.speedmodel) beside the one it measured, on the page's first example prompts,
for both weights the page races (float32 in PyTorch, the 4-bit file in llama.cpp),
through the app's own race (app.race.run.compute_race), greedy, the page's default tree.

    PYTHONPATH=. python research/predicted_speed.py --out benchmarks/sampling/predicted_speed.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from app.core.forms import WEIGHTS_AS_STORED, WEIGHTS_FLOAT32, RaceForm, parse_request
from app.models.hub import ModelHub
from app.race.run import compute_race
from app.race.summary import summary
from app.web.layout import load_examples
from gumiho.files import LibraryPaths, configure
from gumiho.kernels.machine import cpu_summary


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="races per prompt and weight; the medians are kept")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    hub = ModelHub(access=None).start()
    hub.wait_ready()
    if not hub.ready:
        print(f"the default model did not load: {hub.error}", file=sys.stderr)
        return 1
    weights = [WEIGHTS_FLOAT32] + ([WEIGHTS_AS_STORED] if hub.default.runtime.name == "llama.cpp" else [])
    rows = []
    for w in weights:  # one untimed race per runtime first: its one-time costs
        req = parse_request(RaceForm(load_examples()[0], 16, target_weights=w))
        hub.submit(lambda: compute_race(hub, req, threading.Event())).result()
    for i, prompt in enumerate(load_examples()[:args.prompts]):
        for w in weights:
            req = parse_request(RaceForm(prompt, args.max_new_tokens, target_weights=w))
            races = [summary(hub.submit(lambda: compute_race(hub, req, threading.Event())).result(), prompt)
                     for _ in range(args.repeats)]
            races.sort(key=lambda a: a["speedup"])
            mid = races[len(races) // 2]  # the median race by measured speedup
            row = {"prompt": i, "weights": w, "speedup": mid["speedup"], "predicted_speedup": mid["predicted_speedup"],
                   "tau": mid["gumiho"]["tau"], "predicted_tau": mid["predicted_run_tau"],
                   "prediction": mid["prediction"], "machine": mid["machine"],
                   "all_speedups": [a["speedup"] for a in races],
                   "all_predicted": [a["predicted_speedup"] for a in races]}
            row["predicted_over_measured"] = round(row["predicted_speedup"] / row["speedup"], 3)
            rows.append(row)
            print(f"prompt {i} {w:<9} measured {row['speedup']:.3f} predicted {row['predicted_speedup']:.3f} "
                  f"({row['predicted_over_measured']:.3f})", flush=True)
    lines = [f"predicted against measured speedup: {args.prompts} prompts, {args.max_new_tokens} new tokens, median "
             f"of {args.repeats} races; {cpu_summary()}",
             f"{'prompt':>6} {'weights':<10} {'measured':>9} {'predicted':>10} {'ratio':>7} {'pred. tau':>9}"]
    for r in rows:
        lines.append(f"{r['prompt']:>6} {r['weights']:<10} {r['speedup']:9.3f} {r['predicted_speedup']:10.3f} "
                     f"{r['predicted_over_measured']:7.3f} {r['predicted_tau']:9.3f}")
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": vars(args), "cpu": cpu_summary(), "runs": rows}, indent=1))
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
