"""``python -m gumiho.export gumiho SRC OUT``: a drafter of the ``gumiho`` kind written in
the layout the vLLM plugin (plugins/vllm-gumiho) loads (gumiho.formats.vllm_gumiho holds
the layout), so that vLLM serves it with
``{"method": "eagle", "model": OUT, "num_speculative_tokens": K}``.

SRC: a drafter folder of this project (trained with ``python -m gumiho.train``), an
official ``amd/Gumiho-*`` checkpoint (a hub id, or a folder or file holding its
``pytorch_model.bin``, read by gumiho.formats.official), or ``shipped`` for the default target's
shipped Gumiho drafter."""
from __future__ import annotations

import argparse
import os

from ..formats.vllm_gumiho import ARCHITECTURE, write_gumiho
from .drafters import DTYPES, add_common_arguments, load_for_export


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p, "gumiho", "a gumiho drafter folder, an official amd/Gumiho-* checkpoint (hub id, "
                                      "folder or file)")


def run(args) -> int:
    """A gumiho drafter written in the layout the vllm-gumiho plugin serves."""
    print(export(args))
    return 0


def export(args) -> str:
    """Export; returns a one-line summary."""
    target, drafter = load_for_export(args, "gumiho")
    files = write_gumiho(drafter, args.out, target.config, dtype=DTYPES[args.dtype], source=args.src)
    cfg = drafter.cfg
    return (f"wrote {', '.join(os.path.basename(f) for f in files)} to {args.out} ({ARCHITECTURE}, {args.dtype}; "
            f"{cfg.serial_positions} serial positions, {cfg.mlp_heads} MLP heads, so up to "
            f"{cfg.serial_positions + cfg.mlp_heads} speculative tokens; draft vocabulary "
            f"{drafter.draft_vocab_ids.numel()} tokens)")
