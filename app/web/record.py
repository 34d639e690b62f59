"""Record the example prompts' runs once, on a quiet machine, for the app to replay:

    python -m app.web.record                       # every example, every kind
    python -m app.web.record --kinds race --examples 2 --out FILE

For each example prompt (assets/examples.json) it computes what the page and the API
would compute for it at their starting settings: the race, the walkthrough (greedy and
at temperature 0.8), the comparison of every shipped drafter and the losslessness
check, one at a time, and writes them with this app's setup (target, runtime,
drafters) and the machine's name and date. The app replays a recording only for that
setup and those settings (app/replays/store.py); after a new drafter, run this again.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

from gumiho.files import LibraryPaths, configure

from ..compare.run import CompareForm, compute_compare, parse_compare
from ..core.forms import SIZED_SHAPE, RaceForm, parse_request
from ..core.settings import AppSettings
from ..lossless.run import LosslessForm, compute_lossless, parse_lossless
from ..models.hub import ModelHub
from ..race.run import compute_race
from ..replays.store import Recordings, machine_words, setup_of, today
from ..walkthrough.steps import PAPER_TREE, compute_walk, walk_request
from .layout import load_examples

KINDS = ("race", "walkthrough", "compare", "lossless")
WALK_TEMPERATURES = (0.0, 0.8)


def example_requests(prompt: str, access, kinds=KINDS):
    """(kind, checked request, compute) for each run of one example prompt, at the
    starting settings of the page and the API (their requests are the same: a test
    holds them to it)."""
    if "race" in kinds:
        yield "race", parse_request(RaceForm(prompt), access), compute_race
    if "walkthrough" in kinds:
        for temperature in WALK_TEMPERATURES:
            yield "walkthrough", walk_request(RaceForm(prompt, 24, temperature, 1.0, 0), PAPER_TREE, access), \
                compute_walk
    if "compare" in kinds:
        yield "compare", parse_compare(CompareForm(prompt, tree_shape=SIZED_SHAPE), access), compute_compare
    if "lossless" in kinds:
        yield "lossless", parse_lossless(LosslessForm(prompt)), compute_lossless


def record(hub: ModelHub, prompts: list[str], kinds=KINDS, say=print) -> Recordings:
    hub.start()
    if not hub.wait_ready(900) or not hub.ready:
        raise SystemExit(f"the model did not load: {hub.error or 'timed out'}")
    out = Recordings(setup_of(hub), f"{machine_words()} on {today()}")
    for i, prompt in enumerate(prompts, 1):
        for kind, req, compute in example_requests(prompt, hub.access, kinds):
            t0 = time.perf_counter()
            result = hub.submit(lambda: compute(hub, req, threading.Event())).result()
            out.add(kind, req, result)
            say(f"example {i}/{len(prompts)} {kind}: {time.perf_counter() - t0:.1f} s")
    return out


def main(argv=None) -> int:
    settings = AppSettings.from_environment(os.environ)  # an entry point: the operator's settings, read once
    configure(LibraryPaths.from_environment(os.environ))  # and the library's paths
    p = argparse.ArgumentParser(prog="python -m app.web.record", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=settings.recordings_file, help="the recordings file (default: the app's, "
                   "GUMIHO_APP_RECORDINGS or assets/recordings/examples.pkl.gz)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"which runs, comma-separated ({', '.join(KINDS)})")
    p.add_argument("--examples", type=int, default=0, help="only the first N example prompts (0: all)")
    args = p.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not args.out:
        p.error(f"unknown kinds {unknown}; choose from {', '.join(KINDS)}" if unknown else "give --out")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    prompts = load_examples()
    if args.examples > 0:
        prompts = prompts[:args.examples]
    recordings = record(ModelHub(settings=settings), prompts, kinds)
    recordings.save(args.out)
    print(f"{len(recordings)} runs recorded on {recordings.recorded_on}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
