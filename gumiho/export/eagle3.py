"""``python -m gumiho.export eagle3 SRC OUT``: an eagle3 drafter (shipped or trained with
``gumiho.train --kind eagle3``) written as an EAGLE-3 checkpoint folder that vLLM's
``llama_eagle3`` loader and SGLang's LlamaForCausalLMEagle3 read (gumiho.formats.eagle3
holds the layouts and the tensor map). SRC: a drafter folder, or ``shipped`` for the
default target's shipped eagle3 drafter."""
from __future__ import annotations

import argparse
import os

from ..formats.eagle3 import LAYOUTS, write_eagle3
from .drafters import DTYPES, add_common_arguments, load_for_export


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p, "eagle3", "an eagle3 drafter folder")
    p.add_argument("--layout", default="eagle", choices=LAYOUTS,
                   help="eagle: the EAGLE repository's and SpecForge's (midlayer.*), what vLLM and SGLang load "
                        "directly; speculators: the speculators library's (layers.0.*)")
    p.add_argument("--num-speculative-tokens", type=int, default=3,
                   help="draft length a speculators config proposes (vLLM's num_speculative_tokens default)")


def run(args) -> int:
    """An eagle3 drafter written as an EAGLE-3 checkpoint folder that vLLM and SGLang load."""
    print(export(args))
    return 0


def export(args) -> str:
    """Export; returns a one-line summary."""
    target, drafter = load_for_export(args, "eagle3")
    drafter = drafter.to(DTYPES[args.dtype])
    files = write_eagle3(drafter, args.out, target.config, layout=args.layout,
                         num_speculative_tokens=args.num_speculative_tokens)
    return (f"wrote {', '.join(os.path.basename(f) for f in files)} to {args.out} ({args.layout} layout, "
            f"{args.dtype}; draft vocabulary {drafter.draft_vocab_ids.numel()} tokens, fused target layers "
            f"{list(drafter.cfg.feature_layers or ())})")
