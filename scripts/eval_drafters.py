"""Held-out top-1 agreement of several drafters on the same held-out split, so drafters
trained on different data (e.g. before and after a second training stage) are
compared on equal terms. The split is the one `python -m gumiho.train` makes for the
same --data, --eval-fraction and --seed, so no drafter trained with those settings has
seen it.

    python scripts/eval_drafters.py --data data/wiki-b,data/distill-new-a,data/distill-new-b,data/distill-s2 \\
        runs/shipped-gumiho runs/stage2-gumiho
"""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    from gumiho.models import load_drafter, load_target
    from gumiho.train import data as tdata
    from gumiho.train.loop import evaluate
    from gumiho.train.objective import LossConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drafters", nargs="+", help="drafter folders")
    ap.add_argument("--data", required=True)
    ap.add_argument("--eval-fraction", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    args = ap.parse_args(argv)
    target = load_target()
    _, held_out = tdata.split(tdata.load_sequences(args.data, args.max_len), args.eval_fraction, args.seed)
    print(f"{len(held_out)} held-out sequences of {args.data}")
    for folder in args.drafters:
        drafter = load_drafter(folder, target)
        report = evaluate(drafter, held_out, args.batch_tokens, LossConfig(), torch.device("cpu"))
        print(json.dumps({"drafter": folder, "top1_by_position": [round(a, 3) for a in report["top1_by_position"]],
                          "loss": round(report["loss"], 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
