"""`python -m gumiho.train.features`: cache the target's fused features for shards.

Reads the token ids and masks of every shard in ``--data`` (distilled shards, or
text-only ones), runs the target once over them (several right-padded sequences per
forward) and writes, shard for shard, a copy holding the final-norm hidden states and
the states of ``--layers`` (``features``, float16): what a drafter with those
``feature_layers`` trains on with ``--features cached``. The same function computes
them inside training steps with ``--features on-the-fly`` (gumiho.train.states), so
both give the same states up to float16 rounding.

Costs disk: (k + 1) * H * 2 bytes a token (SmolLM2-135M, three layers: 4.6 kB a
token); on-the-fly training costs a target forward per step instead. Shard by shard
and resumable: finished shards are kept, a rerun continues with the next.

    python -m gumiho.train.features --data data/distill --out data/distill-f --layers default
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see gumiho.train.sources.distill

import argparse
import sys
import time
from pathlib import Path

import torch

from ..errors import GumihoError
from ..files import LibraryPaths, configure
from . import shards
from .data import Sequence, check_data_dir, collate, length_groups, shard_folders
from .states import target_states


def feature_shard(model, tensors: dict, layers, max_tokens: int) -> dict:
    """The shard ``tensors`` with ``hidden`` and ``features`` computed by ``model``."""
    seqs = [Sequence(ids.long(), mask, None) for ids, mask, _ in shards.iter_sequences(tensors)]
    hidden: list = [None] * len(seqs)
    feats: list = [None] * len(seqs)
    for rows in length_groups([len(s.ids) for s in seqs], max_tokens):
        batch = collate(seqs, rows, "cpu")  # right-padded, as training pads
        h, f = target_states(model, batch["ids"], batch["valid"], layers)
        for r, i in enumerate(rows):
            n = len(seqs[i].ids)
            hidden[i] = h[r, :n].to(torch.float16).cpu()
            feats[i] = f[r, :n].to(torch.float16).cpu()
    return {"input_ids": tensors["input_ids"], "offsets": tensors["offsets"], "loss_mask": tensors["loss_mask"],
            "hidden": torch.cat(hidden).contiguous(), "features": torch.cat(feats).contiguous()}


def run(model, data: str, out: str, layers, max_tokens: int = 4096, log=print) -> dict:
    """Cache features for every shard of ``data`` (a folder, a folder of part-K
    folders, or several separated by commas) into ``out`` (one sub-folder per input
    folder when there are several). Returns counts."""
    folders = [f for spec in data.split(",") for f in shard_folders(spec)]
    for f in folders:
        check_data_dir(f)
    out_dir = Path(out)
    done = written = tokens = 0
    started = time.time()
    for k, folder in enumerate(folders):
        dest = out_dir if len(folders) == 1 else out_dir / f"part-{k}"
        dest.mkdir(parents=True, exist_ok=True)
        shards.remove_stale_tmp(dest)
        for src in sorted(Path(folder).glob("shard_*.safetensors")):
            target_path = dest / src.name
            if target_path.exists() and shards.shard_feature_layers(target_path) == tuple(layers):
                done += 1
                continue
            tensors = shards.load_shard(src)
            packed = feature_shard(model, tensors, layers, max_tokens)
            shards.write_shard(target_path, packed, layers)
            written += 1
            tokens += int(tensors["offsets"][-1])
            log(f"{folder}/{src.name} -> {target_path}: {int(tensors['offsets'][-1])} tokens, "
                f"{tokens / max(time.time() - started, 1e-9):.0f} tokens/s")
    return {"shards_written": written, "shards_kept": done, "tokens": tokens, "wall_s": time.time() - started}


def main(argv=None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    from .__main__ import parse_feature_layers

    p = argparse.ArgumentParser(prog="python -m gumiho.train.features", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", required=True, help="folder(s) of shards (several separated by commas)")
    p.add_argument("--out", required=True, help="output folder (rerun to resume)")
    p.add_argument("--layers", default="default", help="'default' (2, N/2, N-3) or layer numbers, e.g. 2,15,27")
    p.add_argument("--model", default=None, help="target: hub id or local folder (default: the embedded SmolLM2)")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per forward")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args(argv)
    try:
        from ..drafter import default_feature_layers
        from ..loading import load_target

        if args.threads:
            torch.set_num_threads(args.threads)
        layers = parse_feature_layers(args.layers)
        target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
        n_layers = target.config.get_text_config().num_hidden_layers
        if layers == "default":
            layers = default_feature_layers(n_layers)
        if max(layers) > n_layers or min(layers) < 0:
            raise GumihoError(f"--layers must lie in 0..{n_layers} for {target.name}, got {list(layers)}")
        summary = run(target.runtime_model, args.data, args.out, layers, args.max_tokens)
        print(f"layers {list(layers)}: {summary}")
        return 0
    except GumihoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
