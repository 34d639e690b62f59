"""``python -m gumiho.export eagle3 SRC OUT``: an eagle3 drafter (shipped or trained with
``gumiho.train --kind eagle3``) written as an EAGLE-3 checkpoint folder that vLLM's
``llama_eagle3`` loader and SGLang's LlamaForCausalLMEagle3 read (gumiho.formats.eagle3
holds the layouts and the tensor map). SRC: a drafter folder, or ``shipped`` for the
default target's shipped eagle3 drafter."""
from __future__ import annotations

import argparse
import os

import torch

from ..errors import GumihoError
from ..formats.eagle3 import LAYOUTS, write_eagle3

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help="an eagle3 drafter folder, or 'shipped' (assets/drafters/smollm2-135m-eagle3)")
    p.add_argument("out", help="output folder (config.json + model.safetensors)")
    p.add_argument("--layout", default="eagle", choices=LAYOUTS,
                   help="eagle: the EAGLE repository's and SpecForge's (midlayer.*), what vLLM and SGLang load "
                        "directly; speculators: the speculators library's (layers.0.*)")
    p.add_argument("--model", default=None, help="the drafter's target (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="weights' dtype in the export")
    p.add_argument("--num-speculative-tokens", type=int, default=3,
                   help="draft length a speculators config proposes (vLLM's num_speculative_tokens default)")
    p.add_argument("--force", action="store_true", help="write into an OUT that is not empty")


def run(args) -> int:
    """An eagle3 drafter written as an EAGLE-3 checkpoint folder that vLLM and SGLang load."""
    print(export(args))
    return 0


def export(args) -> str:
    """Export; returns a one-line summary."""
    from ..models import load_drafter, load_target, shipped_drafter_path

    src = shipped_drafter_path("eagle3") if args.src == "shipped" else args.src
    if src is None:
        raise GumihoError("No eagle3 drafter is shipped in this copy (assets/drafters/smollm2-135m-eagle3).")
    if os.path.isdir(args.out) and os.listdir(args.out) and not args.force:
        raise GumihoError(f"{args.out!r} exists and is not empty; give another folder, or --force to write into it.")
    target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
    drafter = load_drafter(src, target, dtype="fp32").to(DTYPES[args.dtype])
    files = write_eagle3(drafter, args.out, target.config, layout=args.layout,
                         num_speculative_tokens=args.num_speculative_tokens)
    return (f"wrote {', '.join(os.path.basename(f) for f in files)} to {args.out} ({args.layout} layout, "
            f"{args.dtype}; draft vocabulary {drafter.draft_vocab_ids.numel()} tokens, fused target layers "
            f"{list(drafter.cfg.feature_layers or ())})")
