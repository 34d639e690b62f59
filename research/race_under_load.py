"""Benchmark: the app's race on a quiet machine and on a busy one, for both weights the
page races (float32 in PyTorch, the 4-bit file in llama.cpp), with how busy the race
itself measured the machine to be (gumiho.bench.machine_load).

For each prompt (the page's example prompts), each weight and each load, one race of
the default model and its shipped Gumiho drafter, through the app's own code
(app.race.run.compute_race on the model thread of an app.models.hub.ModelHub, the tree
the page gives when its controls are left alone). The loads, interleaved prompt by
prompt so that slow drift of the machine falls on all of them:

* quiet: nothing started beside the race;
* hog: ``--hog-procs`` processes spinning on the CPU for the whole race;
* halfway: the same hog, started once the race has produced half of its tokens (load
  that comes and goes: what the alternating clock is built for);
* one: a single spinning process for the whole race;
* light: a single process busy 30% of every 50 ms, for the whole race.

``--loads`` picks which run (quiet always); the lighter ones place the busy threshold
(gumiho.bench.machine_load.BUSY_SHARE) between a share that leaves the speedup alone
and one that moves it.

Per weight and load: the median speedup, the median of the per-prompt ratios of the
loaded speedup over the quiet one (1 = the lesson unchanged), and the median share of
the CPUs the race saw other processes use. A ratio within 10% of 1 is "fair".

    PYTHONPATH=. python research/race_under_load.py --out benchmarks/busy/race_under_load.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.core.forms import WEIGHTS_AS_STORED, WEIGHTS_FLOAT32, RaceForm, parse_request
from app.models.hub import ModelHub
from app.race.run import Progress, compute_race
from app.views.render import speedup
from app.web.layout import load_examples
from gumiho.files import LibraryPaths, configure
from gumiho.kernels.machine import cpu_summary

FAIR = 0.10
LOADS = ("quiet", "hog", "halfway", "one", "light")


SPIN = "while True: pass"
# Busy for `duty` of every 50 ms, asleep the rest.
DUTY = ("import time\nwhile True:\n    end = time.monotonic() + {busy}\n    while time.monotonic() < end: pass\n"
        "    time.sleep({idle})\n")


class Hog:
    """``procs`` processes that each keep one core busy (``duty`` of the time) until
    stopped: separate interpreters, competing for the CPU as another program would."""

    def __init__(self, procs: int, duty: float = 1.0):
        self.n, self.duty = procs, duty
        self.procs: list[subprocess.Popen] = []

    def start(self):
        code = SPIN if self.duty >= 1 else DUTY.format(busy=0.05 * self.duty, idle=0.05 * (1 - self.duty))
        if not self.procs:
            self.procs = [subprocess.Popen([sys.executable, "-S", "-c", code]) for _ in range(self.n)]

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()
        self.procs = []


class HogAt(Progress):
    """The race's progress, which starts the hog once both decoders together have
    produced ``at_tokens`` tokens (called between timed steps, off both clocks)."""

    def __init__(self, hog: Hog, at_tokens: int):
        super().__init__()
        self.hog, self.at_tokens = hog, at_tokens

    def produced(self, vanilla: int, gumiho: int) -> None:
        super().produced(vanilla, gumiho)
        if vanilla + gumiho >= self.at_tokens:
            self.hog.start()


def one_race(hub: ModelHub, req, progress: Progress = None) -> dict:
    res = hub.submit(lambda: compute_race(hub, req, threading.Event(), progress)).result()
    sp = speedup(res)
    m = res.machine
    return {"speedup": sp[0] if sp else None, "vanilla_s": res.vanilla.wall_s, "gumiho_s": res.gumiho.wall_s,
            "tokens": res.vanilla.stats().new_tokens + res.gumiho.stats().new_tokens, "tau": res.gumiho.stats().tau,
            "machine": m.as_record() if m else None}


def raced(hub: ModelHub, req, load: str, procs: int, half: int) -> dict:
    hog = {"one": Hog(1), "light": Hog(1, 0.3)}.get(load) or Hog(procs)
    try:
        if load in ("hog", "one", "light"):
            hog.start()
            time.sleep(0.3)  # the hog running before the first timed step
            return one_race(hub, req)
        if load == "halfway":
            return one_race(hub, req, HogAt(hog, half))
        return one_race(hub, req)
    finally:
        hog.stop()
        time.sleep(0.5)  # the machine quiet again before the next race


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # the script's entry: the library's paths, read once
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=4, help="the page's first N example prompts (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--hog-procs", type=int, default=2, help="busy processes (default 2: one per core here)")
    ap.add_argument("--loads", default="hog,halfway", help=f"beside quiet, of {', '.join(LOADS[1:])}")
    ap.add_argument("--out", help="write every race's figures here (JSON), and a table beside it (.txt)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    hub = ModelHub(access=None).start()  # the default model and drafter, warmed up as the app does
    hub.wait_ready()
    if not hub.ready:
        print(f"the default model did not load: {hub.error}", file=sys.stderr)
        return 1
    print(f"{hub.default.name} loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    loads = ("quiet",) + tuple(x for x in args.loads.split(",") if x in LOADS and x != "quiet")
    prompts = load_examples()[:args.prompts]
    weights = [WEIGHTS_FLOAT32] + ([WEIGHTS_AS_STORED] if hub.default.runtime.name == "llama.cpp" else [])
    runs = []
    for i, prompt in enumerate(prompts):
        for w in weights:
            req = parse_request(RaceForm(prompt, args.max_new_tokens, target_weights=w))
            if i == 0:
                one_race(hub, req)  # untimed: one-time costs of this runtime
            loaded = loads[1:]
            order = loaded[i % len(loaded):] + loaded[:i % len(loaded)]  # rotated prompt by prompt
            quiet_tokens = None
            row = {"prompt": i, "weights": w}
            for load in ("quiet",) + order:  # quiet first: halfway needs its count
                r = raced(hub, req, load, args.hog_procs, (quiet_tokens or 2 * args.max_new_tokens) // 2)
                quiet_tokens = quiet_tokens or r["tokens"]
                row[load] = r
                share = r["machine"]["others_share"] if r["machine"] else float("nan")
                print(f"prompt {i} {w:<9} {load:<8} speedup {r['speedup']:.3f}  others {share:.2f}", flush=True)
            runs.append(row)

    lines = [f"race under load: {len(prompts)} prompts, {args.max_new_tokens} new tokens, hog of {args.hog_procs} "
             f"spinning process(es); {cpu_summary()}, {platform.machine()}",
             f"{'weights':<10} {'load':<8} {'speedup':>8} {'loaded/quiet':>13} {'others':>7}  fair (within {FAIR:.0%})"]
    table = {}
    for w in weights:
        rows = [r for r in runs if r["weights"] == w]
        for load in loads:
            sp = statistics.median(r[load]["speedup"] for r in rows)
            ratio = statistics.median(r[load]["speedup"] / r["quiet"]["speedup"] for r in rows)
            others = statistics.median(r[load]["machine"]["others_share"] for r in rows if r[load]["machine"])
            table[f"{w}/{load}"] = {"speedup": round(sp, 3), "loaded_over_quiet": round(ratio, 3),
                                    "others_share": round(others, 3)}
            fair = "" if load == "quiet" else ("yes" if abs(ratio - 1) <= FAIR else "no")
            lines.append(f"{w:<10} {load:<8} {sp:8.3f} {ratio:13.3f} {others:7.2f}  {fair}")
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"settings": vars(args), "cpu": cpu_summary(), "table": table, "runs": runs},
                                  indent=1))
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
