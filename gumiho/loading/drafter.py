"""Loading a drafter for a loaded target: this project's folders, other projects'
layouts (gumiho.formats), the paper's official checkpoints (gumiho.formats.official), or
random weights of a kind (a drafter to compare against, or one not trained yet)."""
from __future__ import annotations

import json
import os
from typing import Optional

import torch

from ..drafter import Drafter, DrafterConfig
from ..engine.target import Target
from ..errors import GumihoError
from ..kernels.cpulinear import pack_linears
from .device import drafter_dtype, drafter_int4


def load_drafter(path: str, target: Target, dtype: Optional[str] = None):
    """A drafter folder (config.json + model.safetensors) attached to ``target``, an
    EAGLE-3 or Medusa checkpoint in another project's layout (folder or hub id; see
    gumiho.formats), or an official Gumiho checkpoint (hub id, or a folder or file
    with pytorch_model.bin; see gumiho.formats.official). Refuses a drafter made for another model. ``dtype``: see
    :func:`drafter_dtype` (and :func:`drafter_int4`: beside a 4-bit target the drafter drafts
    through 4-bit copies of its weights where the CPU takes them)."""
    drafter = _load_drafter(path, target, dtype)
    return ready_to_draft(drafter.use_int4() if drafter_int4(target, dtype) else drafter)


def ready_to_draft(drafter: Drafter) -> Drafter:
    """The drafter prepared once, at load, for the few-row products of drafting: on a
    CPU its linear layers pre-packed (gumiho.kernels.cpulinear; layers already switched to
    4-bit products keep them). Generations then draft with it as it is."""
    if drafter.weight_device.type == "cpu":
        pack_linears(drafter)
    return drafter


def _load_drafter(path: str, target: Target, dtype: Optional[str]):
    from ..formats.detect import hub_folder, load_foreign
    from ..formats.official import is_official_source, load_official, looks_like_hub_id

    if not isinstance(target, Target):
        raise GumihoError(f"load_drafter needs the loaded target the drafter will draft for, got "
                          f"{type(target).__name__}: call load_drafter(path, load_target(...)).")
    if not isinstance(path, str) or not path.strip():
        raise GumihoError("No drafter path given: pass a drafter folder (config.json + model.safetensors), an "
                          "official Gumiho checkpoint, or train one with `python -m gumiho.train`.")
    if _engine_weights_without_config(path):
        raise GumihoError(
            f"Drafter folder {path!r} has model.safetensors but no config.json; put the config.json "
            f"saved with these weights next to them (or save the drafter again)."
        )
    dt = drafter_dtype(target, dtype)
    folder = os.path.expanduser(path.strip())
    if os.path.isdir(folder) and os.path.isfile(os.path.join(folder, "config.json")):
        # Another project's layout (EAGLE-3, Medusa) by its config.json; None: this project's own.
        foreign = load_foreign(folder, target, dt, where=path)
        if foreign is not None:
            return foreign
    elif looks_like_hub_id(path.strip()) and (hub := hub_folder(path.strip())) is not None:
        return load_foreign(hub, target, dt, where=path)
    if is_official_source(path):
        return load_official(path, target, dtype=dt)
    if not (os.path.isfile(os.path.join(folder, "config.json"))
            and os.path.isfile(os.path.join(folder, "model.safetensors"))):
        # One answer for a missing path, an ordinary file and a folder without a
        # drafter, so that it does not tell a remote user which paths exist here.
        raise GumihoError(f"There is no drafter at {path!r}: the path does not exist or is not a drafter. A drafter "
                          f"folder must hold config.json and model.safetensors (written by `python -m gumiho.train`); "
                          f"an official Gumiho checkpoint is a pytorch_model.bin or .safetensors file, a folder "
                          f"holding one, or a hub id like 'amd/Gumiho-vicuna-7b'.")
    drafter = Drafter.load(folder, device=target.device, dtype=dt)
    drafter.attach_target(target.model)
    return drafter


def _engine_weights_without_config(path) -> bool:
    """A folder holding this engine's drafter weights (they carry ``draft_vocab_ids``)
    whose config.json is missing: not an official checkpoint, just incomplete."""
    if not isinstance(path, str) or not os.path.isdir(path) or os.path.exists(os.path.join(path, "config.json")):
        return False
    weights = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights):
        return False
    try:
        from safetensors import safe_open

        with safe_open(weights, framework="pt") as f:
            return "draft_vocab_ids" in f.keys()
    except Exception:  # unreadable: let the loaders report it
        return False


def random_drafter(target: Target, kind: str, seed: int, dtype: Optional[str] = None) -> Drafter:
    """A drafter of ``kind`` sized for ``target`` with random weights drawn after
    ``torch.manual_seed(seed)``, ready to draft (see :func:`drafter_dtype` for ``dtype``)."""
    torch.manual_seed(seed)
    d = Drafter(DrafterConfig.for_target(target.config, kind))
    d = d.to(device=target.device, dtype=drafter_dtype(target, dtype)).eval().attach_target(target.model)
    return ready_to_draft(d.use_int4() if drafter_int4(target, dtype) else d)


def check_drafter_source(src: str, kind: Optional[str] = None) -> Optional[str]:
    """What a command can tell of a drafter source before it loads any model or builds
    anything: a local path that does not exist is refused, naming it, and so is a
    drafter folder of this project whose config names another kind than ``kind``
    (None: any). Returns the kind its config names (None: not this project's layout,
    or a hub id, which is the loader's to check)."""
    from ..formats.official import looks_like_hub_id

    path = os.path.expanduser(src)
    if not os.path.exists(path):
        if looks_like_hub_id(src):
            return None
        raise GumihoError(f"The drafter {src!r} does not exist: give a drafter folder (config.json + "
                          f"model.safetensors) or an official amd/Gumiho-* checkpoint.")
    config = os.path.join(path, "config.json")
    try:
        with open(config, encoding="utf-8") as f:
            named = json.load(f).get("kind")
    except (OSError, ValueError, AttributeError):
        return None  # another project's layout, or none: the loader says what it finds
    if not isinstance(named, str):
        return None
    if kind is not None and named != kind:
        raise GumihoError(f"{src!r} holds a drafter of the {named!r} kind; this command takes {kind!r} drafters"
                          + (" (`python -m gumiho.export eagle3` writes eagle3 ones)." if named == "eagle3" else "."))
    return named
