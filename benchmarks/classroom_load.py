"""A class on one server: visitors clicking example prompts (answered from the
recordings) and visitors asking for live races with prompts of their own, all at
the same moment, against a real app server on loopback.

    python benchmarks/classroom_load.py                      # 30 visitors, 10 live runs
    python benchmarks/classroom_load.py --visitors 8 --live 3 --tokens 16

It records the examples it clicks first (python -m app.web.record, the race only,
into a temporary file) so that the server it starts has recordings for its own
setup, then starts ``python app.py`` with them, sends the load, races every live
prompt again alone, and prints one JSON object (written to --out too): per visitor
the seconds to an answer, refusals, where each answer came from, the live races'
speedups at once and alone, whether each live race's texts are identical, and the
server's memory before and after. Loopback only; every request has a deadline and
the server is stopped at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "app"))  # the load test and the suite's app server

from classroom import run  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--visitors", type=int, default=30)
    p.add_argument("--live", type=int, default=10)
    p.add_argument("--tokens", type=int, default=32, help="new tokens per live race")
    p.add_argument("--runtime", default="torch", choices=("torch", "auto"),
                   help="GUMIHO_RUNTIME of the recording and the server (auto: as a Space runs it)")
    p.add_argument("--deadline", type=float, default=900.0, help="seconds for the whole load")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "classroom", "load.json"))
    args = p.parse_args(argv)
    if not (1 <= args.visitors <= 100 and 0 <= args.live <= 20):
        p.error("at most 100 visitors and 20 live runs (a load test, not a flood)")
    out = run(args.visitors, args.live, args.tokens, args.deadline, {"GUMIHO_RUNTIME": args.runtime})
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
