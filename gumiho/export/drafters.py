"""What the drafter exports (``eagle3``, ``gumiho``) share: their common command-line
arguments, and reading the drafter to export with its target."""
from __future__ import annotations

import argparse
import os

import torch

from ..errors import GumihoError

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def add_common_arguments(p: argparse.ArgumentParser, kind: str, sources: str) -> None:
    p.add_argument("src", help=f"{sources}, or 'shipped' (assets/drafters/smollm2-135m-{kind})")
    p.add_argument("out", help="output folder (config.json + model.safetensors)")
    p.add_argument("--model", default=None, help="the drafter's target (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="weights' dtype in the export")
    p.add_argument("--force", action="store_true", help="write into an OUT that is not empty")


def load_for_export(args, kind: str):
    """The target (float32, torch runtime) and the drafter ``args.src`` (``shipped``: the
    default target's drafter of ``kind``), after checking that ``args.out`` may be written."""
    from ..loading import check_drafter_source, load_drafter, load_target, shipped_drafter_path

    src = shipped_drafter_path(kind) if args.src == "shipped" else args.src
    if src is None:
        raise GumihoError(f"No {kind} drafter is shipped in this copy (assets/drafters/smollm2-135m-{kind}).")
    if os.path.isdir(args.out) and os.listdir(args.out) and not args.force:
        raise GumihoError(f"{args.out!r} exists and is not empty; give another folder, or --force to write into it.")
    check_drafter_source(src, kind)
    target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
    return target, load_drafter(src, target, dtype="fp32")

