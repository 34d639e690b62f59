"""Shard files holding cached target hidden states.

A shard is one safetensors file with four tensors:

* ``input_ids`` int32 [N]   -- every sequence of the shard, concatenated
* ``offsets``   int64 [n+1] -- sequence ``i`` is ``input_ids[offsets[i]:offsets[i+1]]``
* ``loss_mask`` uint8 [N]   -- 1 on tokens the target generated, 0 on prompt/template tokens
* ``hidden``    float16 [N, H] -- the target's last hidden state (after the final norm)

and optionally

* ``features``  float16 [N, k*H] -- the target's states after the layers named in the
  shard's metadata ``feature_layers`` (JSON list), concatenated (gumiho.train.features:
  the cache of fused target features).

``hidden`` may be absent: a text-only shard (token ids and masks, about 5 bytes a
token), whose states training computes on the fly (gumiho.train.states).

Shards are written to a temporary name and then renamed, so a file called
``shard_XXXXX.safetensors`` is always complete; an interrupted run leaves at
most a stray temporary file, which the next run deletes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

SHARD_SUFFIX = ".safetensors"
TMP_SUFFIX = ".tmp"
MANIFEST = "manifest.json"

# Headroom kept free on the disk beyond the shard itself, so that a run never
# fills the disk completely (other processes, the manifest, the log).
DISK_MARGIN_BYTES = 256 * 2**20


class DiskFullError(RuntimeError):
    pass


def shard_path(out_dir: Path, index: int) -> Path:
    return Path(out_dir) / f"shard_{index:05d}{SHARD_SUFFIX}"


def pack_sequences(
    ids: Sequence[Sequence[int]],
    masks: Sequence[Sequence[int]],
    hiddens: Sequence[torch.Tensor],
) -> dict[str, torch.Tensor]:
    """Concatenate per-sequence arrays into the flat shard layout."""
    if not (len(ids) == len(masks) == len(hiddens)) or not ids:
        raise ValueError("pack_sequences needs the same, non-zero number of ids, masks and hiddens")
    lengths = [len(x) for x in ids]
    for n, m, h in zip(lengths, masks, hiddens):
        if len(m) != n or h.shape[0] != n:
            raise ValueError(f"sequence length mismatch: ids {n}, mask {len(m)}, hidden {tuple(h.shape)}")
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    return {
        "input_ids": torch.tensor([t for seq in ids for t in seq], dtype=torch.int32),
        "offsets": torch.from_numpy(offsets),
        "loss_mask": torch.tensor([t for seq in masks for t in seq], dtype=torch.uint8),
        "hidden": torch.cat([h.to(torch.float16) for h in hiddens], dim=0).contiguous(),
    }


def _tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def ensure_free_space(directory: Path, needed: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed + DISK_MARGIN_BYTES:
        raise DiskFullError(
            f"not enough free disk space in {directory}: the next shard needs "
            f"{needed / 2**20:.1f} MiB plus {DISK_MARGIN_BYTES / 2**20:.0f} MiB headroom, "
            f"only {free / 2**20:.1f} MiB free. Free some space and rerun; finished shards are kept."
        )


def write_shard(path: Path, tensors: dict[str, torch.Tensor], feature_layers=None) -> None:
    """Write a shard atomically: temporary file first, then rename. A shard with
    ``features`` names their layers (``feature_layers``) in its metadata."""
    path = Path(path)
    ensure_free_space(path.parent, _tensor_bytes(tensors) + 2**20)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    meta = {"format": "gumiho-distill-v1"}
    if feature_layers is not None:
        meta["feature_layers"] = json.dumps(list(feature_layers))
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale_tmp(out_dir: Path) -> list[Path]:
    """Delete temporary files left behind by an interrupted run."""
    stale = sorted(Path(out_dir).glob(f"*{TMP_SUFFIX}"))
    for p in stale:
        p.unlink()
    return stale


def load_shard(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def shard_stats(path: Path) -> dict[str, int]:
    """Sequence and token counts of a shard, without reading the hidden states."""
    with safe_open(str(path), framework="pt") as f:
        offsets = f.get_tensor("offsets")
        mask = f.get_tensor("loss_mask")
    return {
        "n_seq": int(offsets.numel() - 1),
        "n_tokens": int(offsets[-1]),
        "n_answer_tokens": int(mask.sum()),
    }


def iter_sequences(tensors: dict[str, torch.Tensor]):
    """Yield ``(input_ids, loss_mask, hidden)`` for each sequence of a loaded shard
    (``hidden`` None in a text-only shard)."""
    off = tensors["offsets"].tolist()
    hidden = tensors.get("hidden")
    for a, b in zip(off[:-1], off[1:]):
        yield tensors["input_ids"][a:b], tensors["loss_mask"][a:b], None if hidden is None else hidden[a:b]


def shard_feature_layers(path: Path) -> tuple | None:
    """The layers whose states the shard's ``features`` hold, or None when it has none."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "features" not in f.keys():
            return None
    try:
        return tuple(int(i) for i in json.loads(meta.get("feature_layers", "null")))
    except (TypeError, ValueError):
        raise ValueError(f"shard {Path(path).name} has features but no valid 'feature_layers' metadata") from None


def read_manifest(out_dir: Path) -> dict | None:
    p = Path(out_dir) / MANIFEST
    if not p.exists():
        return None
    return json.loads(p.read_text())


def write_manifest(out_dir: Path, manifest: dict) -> None:
    p = Path(out_dir) / MANIFEST
    tmp = p.with_name(p.name + TMP_SUFFIX)
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, p)
