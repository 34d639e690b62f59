"""What a weights file holds, read without loading it, and whether that is what a
model needs, checked before the model is built.

A model built from a config and then filled from a checkpoint gets random values for
every weight the checkpoint lacks, and the memory for all of them up front: an
almost empty weights file next to a config for a large model would silently serve
random text, after allocating gigabytes. So the loaders here compare the tensor
names and shapes a checkpoint holds (a safetensors file's header; a torch pickle
read with ``weights_only=True``, memory-mapped) with those of the model built on
the meta device (shapes, no memory), and refuse a mismatch first.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from typing import Iterable, Optional

import torch

from ..errors import GumihoError

# Weight files a Hugging Face model folder (or hub repo) may hold, in the order
# transformers prefers them; the index files name the shards of a split checkpoint.
TARGET_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                       "pytorch_model.bin.index.json")


def first_line(e) -> str:
    text = str(e).strip() if e is not None else ""
    return text.splitlines()[0].rstrip(".") if text else type(e).__name__


def unreadable(path: str, e, fix: str = "download it again") -> GumihoError:
    return GumihoError(f"Weights file {path!r} cannot be read ({first_line(e)[:200]}); the file is probably "
                       f"truncated or corrupt: {fix}.")


def read_torch_pickle(path: str) -> dict:
    """A ``.bin`` checkpoint as a dict of tensors, memory-mapped where the file
    allows it. ``weights_only``: a pickle that holds anything but tensors and plain
    containers (code to run, in a hostile file) is refused, never executed."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"it references {found.group(1)}" if found else "it holds more than tensors"
        raise GumihoError(
            f"Refusing to load {path!r}: {what}. Unpickling it could run arbitrary code, so only a plain "
            f"dict of tensors is accepted (re-save it as safetensors, or get it from the original source)."
        ) from None
    except Exception as e:  # a file that is no pickle at all fails anywhere in the unpickler
        raise unreadable(path, e) from None
    if not isinstance(state, dict) or not state:
        raise GumihoError(f"Weights file {path!r} is not a state dict (a dict of named tensors); "
                          f"found {type(state).__name__}.")
    for k, v in state.items():
        if not isinstance(k, str) or not isinstance(v, torch.Tensor):
            raise GumihoError(f"Weights file {path!r} is not a plain state dict: entry {k!r} holds "
                              f"{type(v).__name__}, not a tensor.")
    return state


def safetensors_shapes(path: str) -> dict[str, tuple]:
    """Tensor name -> shape from a safetensors file's header (no tensor is read).
    The header is checked against the file's size on opening, so a truncated file
    fails here."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            return {k: tuple(int(s) for s in f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise unreadable(path, e) from None


def file_shapes(path: str) -> dict[str, tuple]:
    if path.endswith(".safetensors"):
        return safetensors_shapes(path)
    return {k: tuple(int(s) for s in v.shape) for k, v in read_torch_pickle(path).items()}


def checkpoint_shapes(name: str, locate) -> dict[str, tuple]:
    """Tensor name -> shape over a model's weights: its single file, or every shard
    its index names. ``locate(filename)`` gives the local path of one of the model's
    files, or None when it has none of that name (a folder's file, or a hub repo's,
    downloaded into the cache from_pretrained then reads)."""
    for fname in TARGET_WEIGHT_FILES:
        path = locate(fname)
        if not path:
            continue
        if not fname.endswith(".index.json"):
            return file_shapes(path)
        try:
            with open(path, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise GumihoError(f"The weights index {path!r} of {name!r} is not valid ({first_line(e)}); download "
                              f"the model again.") from None
        shapes: dict = {}
        for shard in shards:
            shard_path = locate(shard) if isinstance(shard, str) and "/" not in shard and shard.strip(".") else None
            if not shard_path:
                raise GumihoError(f"Model {name!r} is missing the weights shard {str(shard)[:80]!r} that its index "
                                  f"names; download the model again (all its shards).")
            shapes.update(file_shapes(shard_path))
        return shapes
    raise GumihoError(f"Model {name!r} has no weights: none of {', '.join(TARGET_WEIGHT_FILES)} is there. Give the "
                      f"folder with the model's weights next to its config.json.")


def compare_shapes(expected: dict[str, tuple], found: dict[str, tuple], what: str, fix: str,
                   may_miss: Iterable[str] = (), may_add=lambda key: False,
                   any_shape: Optional[set] = None) -> None:
    """Refuse a checkpoint (``found``) that lacks a tensor the model needs
    (``expected``, minus ``may_miss``: tied copies of another tensor), holds one the
    model has no place for (unless ``may_add(key)``), or holds one in another shape
    (unless listed in ``any_shape``: tensors a conversion reshapes on loading)."""
    allowed = set(may_miss)
    any_shape = any_shape or set()
    missing = [k for k in expected if k not in found and k not in allowed]
    unexpected = [k for k in found if k not in expected and not may_add(k)]
    mismatched = [(k, found[k], expected[k]) for k in found
                  if k in expected and k not in any_shape and tuple(found[k]) != tuple(expected[k])]

    def some(keys):
        return ", ".join(repr(k) for k in keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")

    if mismatched:
        k, got, want = mismatched[0]
        raise GumihoError(f"{what} does not match its config: tensor {k!r} has shape {list(got)} in the weights, "
                          f"but the config makes it {list(want)} ({len(mismatched)} tensor(s) differ). {fix}")
    if missing:
        raise GumihoError(f"{what} lacks {len(missing)} of the {len(expected)} tensors its config describes "
                          f"({some(missing)}); refusing to fill them with random values. {fix}")
    if unexpected:
        raise GumihoError(f"{what} holds {len(unexpected)} tensor(s) its config has no place for "
                          f"({some(unexpected)}): the weights belong to another model. {fix}")


def meta_shapes(module: torch.nn.Module) -> dict[str, tuple]:
    return {k: tuple(int(s) for s in v.shape) for k, v in module.state_dict().items()}


def local_file(folder: str):
    """``locate`` for a local folder (see :func:`checkpoint_shapes`)."""
    def locate(fname: str) -> Optional[str]:
        path = os.path.join(folder, fname)
        return path if os.path.isfile(path) else None
    return locate


def read_checkpoint(path: str) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (safetensors, or a torch pickle of tensors only)."""
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(path, device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise unreadable(path, e) from None
        if not state:
            raise GumihoError(f"Weights file {path!r} holds no tensors; download it again.")
        return state
    return read_torch_pickle(path)


def first_file(folder: str, names, what: str) -> str:
    """The first of ``names`` present in ``folder`` (a checkpoint's weights file)."""
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise GumihoError(f"This {what} folder holds a config.json but none of {', '.join(names)}.")
