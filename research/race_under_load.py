"""Benchmark: the app's race under a load that starts halfway through it.

For each timing scheme of app.race.run (sequential: vanilla alone, then Gumiho
alone; alternating: both advanced in turn, balanced by tokens, each on its own
clock), the same race of the default model and its shipped Gumiho drafter runs
twice: on a quiet machine, and with a CPU hog (``--hog-procs`` processes
spinning) started once the race has produced half of its tokens. Half is counted
in the tokens of both decoders together, taken from the quiet run of the same
scheme (greedy decoding: the loaded run produces the same tokens), so the load
starts in the middle of the race in both schemes and lasts to its end.

A fair scheme's speedup should barely move under such load, since the hog slows
both decoders alike; the sequential one puts all of it on whichever decoder was
running (here mostly Gumiho). The table gives, per scheme, the quiet and loaded
speedups (medians over ``--repeats``), their ratio, and whether the ratio is
within 15% of 1.

    python research/race_under_load.py --max-new-tokens 64
    python research/race_under_load.py --repeats 3 --hog-procs 2 --out race_under_load.json

The machine may be shared: other work shows up as noise in both runs. The races
go through the app's own code (app.race.run.compute_race on the model thread of an
app.models.hub.ModelHub), with the app's default tree for this device.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from gumiho import shipped_drafter_path
from gumiho.app.models.hub import ModelHub
from gumiho.app.race.run import SCHEMES, Progress, compute_race
from gumiho.app.views.render import speedup
from gumiho.app.web.checks.forms import DEVICE_TREE, RaceForm, parse_request

PROMPT = ("Write a short travel blog post about a weekend in Lisbon: two places to eat, one museum worth the "
          "queue, and a tip for getting around the hills.")
TOLERANCE = 0.15


class Hog:
    """``procs`` processes that each keep one core busy until stopped. Separate
    interpreters, not threads: they must compete for the CPU as another program
    on the machine would, not for this process's interpreter lock."""

    def __init__(self, procs: int):
        self.n = procs
        self.procs: list[subprocess.Popen] = []
        self.started_at = None  # (vanilla tokens, gumiho tokens) when it started

    @property
    def running(self) -> bool:
        return bool(self.procs)

    def start(self):
        self.procs = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(self.n)]

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()
        self.procs = []


class HogHalfway(Progress):
    """The race's progress, which starts the hog once both decoders together have
    produced ``at_tokens`` tokens (called between timed steps, off both clocks)."""

    def __init__(self, hog: Hog, at_tokens: int):
        super().__init__()
        self.hog, self.at_tokens = hog, at_tokens

    def produced(self, vanilla: int, gumiho: int) -> None:
        super().produced(vanilla, gumiho)
        if self.hog.started_at is None and vanilla + gumiho >= self.at_tokens:
            self.hog.started_at = (vanilla, gumiho)
            self.hog.start()


def one_race(hub: ModelHub, req, scheme: str, progress: Progress = None) -> dict:
    res = hub.submit(lambda: compute_race(hub, req, threading.Event(), progress, scheme=scheme)).result()
    sp = speedup(res)
    v, g = res.vanilla.stats(), res.gumiho.stats()
    return {"speedup": sp[0] if sp else None, "speedup_kind": sp[1] if sp else None,
            "vanilla_s": res.vanilla.wall_s, "gumiho_s": res.gumiho.wall_s,
            "vanilla_tokens": v.new_tokens, "gumiho_tokens": g.new_tokens, "tau": g.tau}


def brief(run: dict) -> str:
    sp = f"{run['speedup']:.2f}x" if run["speedup"] is not None else "no speedup"
    return f"{sp} (vanilla {run['vanilla_s']:.2f} s, Gumiho {run['gumiho_s']:.2f} s)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--hog-procs", type=int, default=2, help="busy processes started halfway (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="quiet + loaded pairs per scheme (default 1)")
    ap.add_argument("--schemes", default=",".join(("sequential", "alternating")),
                    help=f"comma-separated, of {', '.join(SCHEMES)}")
    ap.add_argument("--out", help="write the figures of every race here (JSON)")
    args = ap.parse_args(argv)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown or args.repeats < 1 or args.hog_procs < 1 or args.max_new_tokens < 2:
        ap.error(f"unknown scheme {unknown[0]!r}" if unknown else "--repeats and --hog-procs must be at least 1, "
                 "--max-new-tokens at least 2")
    if not shipped_drafter_path("gumiho"):
        print("warning: no shipped Gumiho drafter found; the race uses a random-weight drafter", file=sys.stderr)

    t0 = time.perf_counter()
    hub = ModelHub(access=None).start()  # the default model and drafter, warmed up as the app does
    hub.wait_ready()
    if not hub.ready:
        print(f"the default model did not load: {hub.error}", file=sys.stderr)
        return 1
    req = parse_request(RaceForm(args.prompt, args.max_new_tokens, 0.0, 1.0, 0, DEVICE_TREE.depth, DEVICE_TREE.serial_top_k, DEVICE_TREE.total_tokens, "gumiho"))
    print(f"{hub.default.name} with {hub.resolve().drafter_label} loaded in {time.perf_counter() - t0:.0f} s; "
          f"{args.max_new_tokens} new tokens, tree depth {DEVICE_TREE.depth} top-k {DEVICE_TREE.serial_top_k} "
          f"nodes {DEVICE_TREE.total_tokens}, hog of {args.hog_procs} process(es)", flush=True)
    one_race(hub, req, "alternating")  # untimed: one-time costs (a cost-aware tree's measurement, allocations)

    runs = {s: [] for s in schemes}
    for r in range(args.repeats):
        for scheme in schemes:  # the schemes interleaved, so that slow drift of the machine hits both
            quiet = one_race(hub, req, scheme)
            half = (quiet["vanilla_tokens"] + quiet["gumiho_tokens"]) // 2
            hog = Hog(args.hog_procs)
            try:
                loaded = one_race(hub, req, scheme, HogHalfway(hog, half))
            finally:
                hog.stop()
            loaded["hog_started_at"] = {"vanilla_tokens": hog.started_at[0], "gumiho_tokens": hog.started_at[1]} \
                if hog.started_at else None
            runs[scheme].append({"quiet": quiet, "loaded": loaded})
            print(f"  repeat {r + 1} {scheme:<11}  quiet {brief(quiet)}   loaded {brief(loaded)}; hog from "
                  f"(vanilla, Gumiho) tokens {hog.started_at}", flush=True)

    rows = []
    for scheme in schemes:
        # A wall-time speedup needs equal token counts (greedy decoding gives them);
        # a race without one would say nothing here.
        if any(x[k]["speedup"] is None for x in runs[scheme] for k in ("quiet", "loaded")):
            print(f"{scheme}: a race gave no speedup", file=sys.stderr)
            return 1
        q = statistics.median(x["quiet"]["speedup"] for x in runs[scheme])
        h = statistics.median(x["loaded"]["speedup"] for x in runs[scheme])
        rows.append({"scheme": scheme, "quiet_speedup": q, "loaded_speedup": h, "ratio": h / q,
                     "within_15pct": abs(h / q - 1) <= TOLERANCE})
    print()
    print(f"{'scheme':<12} {'quiet':>8} {'hogged':>8} {'hogged/quiet':>13}  within 15%")
    for row in rows:
        print(f"{row['scheme']:<12} {row['quiet_speedup']:>7.2f}x {row['loaded_speedup']:>7.2f}x "
              f"{row['ratio']:>13.2f}  {'yes' if row['within_15pct'] else 'no'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": hub.default.name, "prompt": args.prompt, "max_new_tokens": args.max_new_tokens,
                       "hog_procs": args.hog_procs, "repeats": args.repeats,
                       "tree": {"depth": DEVICE_TREE.depth, "top_k": DEVICE_TREE.serial_top_k,
                                "total_tokens": DEVICE_TREE.total_tokens, "cost_aware": DEVICE_TREE.cost_aware},
                       "summary": rows, "runs": runs}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
