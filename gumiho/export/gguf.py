"""``python -m gumiho.export gguf SRC OUT``: an eagle3 drafter (shipped or trained with
``gumiho.train --kind eagle3``) and its target as the GGUF files llama.cpp's own
server loads for EAGLE-3 drafting (gumiho.formats.eagle3_gguf has the format map):

    OUT/drafter.gguf   the drafter, with the target's tokenizer and the draft vocabulary map
    OUT/target.gguf    the target's GGUF: the embedded default's 4-bit file as stored
                       (or the file --target names), copied

    llama-server -m OUT/target.gguf -md OUT/drafter.gguf --spec-type draft-eagle3 \\
        --spec-draft-n-max 3 --spec-draft-p-min 0

A gumiho drafter is refused in words: llama.cpp has no Gumiho drafting (the refusal
says what it would take). ``python -m gumiho.serve --engine llama.cpp`` does the export,
builds llama-server and starts it."""
from __future__ import annotations

import argparse
import os
import shutil

from ..errors import GumihoError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help="an eagle3 drafter folder, or 'shipped' (assets/drafters/smollm2-135m-eagle3)")
    p.add_argument("out", help="output folder (drafter.gguf + target.gguf)")
    p.add_argument("--target", default=None, metavar="FILE.gguf",
                   help="the drafter's target as a GGUF file (default: the embedded SmolLM2-135M-Instruct, 4-bit)")
    p.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"], help="the drafter's matrices in the file")
    p.add_argument("--no-target-copy", action="store_true", help="write drafter.gguf alone")
    p.add_argument("--force", action="store_true", help="write into an OUT that is not empty")


def run(args) -> int:
    """An eagle3 drafter and its target as GGUF files for llama.cpp's EAGLE-3 drafting."""
    print(export(args))
    return 0


def export(args) -> str:
    """Export; returns a one-line summary."""
    from ..drafter import Drafter
    from ..formats.eagle3_gguf import WHY_NOT_GUMIHO, write_eagle3_gguf
    from ..formats.gguf_target import check_target_file
    from ..loading import check_drafter_source, shipped_drafter_path

    src = shipped_drafter_path("eagle3") if args.src == "shipped" else args.src
    if src is None:
        raise GumihoError("No eagle3 drafter is shipped in this copy (assets/drafters/smollm2-135m-eagle3).")
    if os.path.isdir(args.out) and os.listdir(args.out) and not args.force:
        raise GumihoError(f"{args.out!r} exists and is not empty; give another folder, or --force to write into it.")
    kind = check_drafter_source(src)
    if kind == "gumiho":
        raise GumihoError(WHY_NOT_GUMIHO)
    if kind is None:
        raise GumihoError(f"{args.src!r} is not an eagle3 drafter folder of this project (config.json + "
                          f"model.safetensors, as python -m gumiho.train --kind eagle3 saves it).")
    target = check_target_file(args.target)
    os.makedirs(args.out, exist_ok=True)
    written = write_eagle3_gguf(Drafter.load(os.path.expanduser(src)), os.path.join(args.out, "drafter.gguf"),
                                target, dtype=args.dtype)
    files = ["drafter.gguf"]
    if not args.no_target_copy:
        shutil.copyfile(target, os.path.join(args.out, "target.gguf"))
        files.append("target.gguf")
    return (f"wrote {', '.join(files)} to {args.out} (eagle3, {args.dtype}; draft vocabulary "
            f"{written['draft_vocab']} tokens of {written['vocab']}, fused target layers {written['target_layers']})")
