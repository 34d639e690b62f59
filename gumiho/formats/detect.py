"""Which layout a drafter checkpoint is in, from its config.json alone, and the loader
for it. A folder (or hub repo) with a config.json is one of:

    engine      this project's own drafter (``kind`` and the DrafterConfig fields)
    eagle3      an EAGLE-3 drafter (gumiho.formats.eagle3: EAGLE repository, SpecForge, speculators)
    medusa      Medusa-1 heads (gumiho.formats.medusa)

and anything else is refused by name before a weight is read. A hub repo without a
config.json is an official Gumiho checkpoint (gumiho.formats.official reads those).
"""
from __future__ import annotations

import json
import os
from typing import Optional

from ..errors import GumihoError
from . import eagle3, medusa

MAX_CONFIG_BYTES = 1 << 20  # a drafter's config.json is a few kB; anything far larger is not one
KNOWN = ("this project's drafters (python -m gumiho.train)", "EAGLE-3 (EAGLE repository, SpecForge, speculators)",
         "Medusa-1 heads", "the official Gumiho checkpoints (amd/Gumiho-*)")


def read_config(path: str) -> dict:
    """A config.json as a dict, refusing a file that is not a small JSON object."""
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise GumihoError(f"The drafter's config.json is over {MAX_CONFIG_BYTES >> 20} MiB: not a drafter config.")
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except GumihoError:
        raise
    except (OSError, ValueError) as e:
        raise GumihoError(f"The drafter's config.json cannot be read as JSON ({str(e)[:120]}).") from None
    if not isinstance(raw, dict):
        raise GumihoError("The drafter's config.json does not hold a JSON object.")
    return raw


def layout_of(raw: dict) -> Optional[str]:
    """'engine', 'eagle3', 'medusa', or None for a config in no known layout."""
    if eagle3.layout_of(raw):
        return "eagle3"
    if medusa.layout_of(raw):
        return "medusa"
    if "kind" in raw and "hidden_size" in raw and "vocab_size" in raw:
        return "engine"
    return None


def unknown_layout(where: str) -> GumihoError:
    return GumihoError(f"The drafter at {where!r} is in no layout this engine reads: its config.json is neither "
                       f"{', '.join(KNOWN[:-1])}, nor {KNOWN[-1]} (which come without a config.json).")


def load_foreign(folder: str, target, dtype, where: str):
    """The drafter in ``folder`` when its config.json is another project's layout;
    None for this project's own drafters (the caller loads those)."""
    raw = read_config(os.path.join(folder, "config.json"))
    layout = layout_of(raw)
    if layout is None:
        raise unknown_layout(where)
    if layout == "eagle3":
        return eagle3.load_eagle3(folder, target, dtype=dtype, raw=raw)
    if layout == "medusa":
        return medusa.load_medusa(folder, target, dtype=dtype, raw=raw)
    return None


def hub_folder(repo_id: str) -> Optional[str]:
    """The local folder of hub repo ``repo_id`` when it holds a config.json in another
    project's layout (its weights downloaded beside it), else None: an official
    Gumiho repo (no config.json) or one that cannot be reached, which
    gumiho.formats.official then reports."""
    import huggingface_hub

    try:
        config = huggingface_hub.hf_hub_download(repo_id, "config.json")
    except Exception:  # no such file, no network, offline mode: the official loader says which
        return None
    if not os.path.isfile(config):
        return None
    raw = read_config(config)
    layout = layout_of(raw)
    if layout not in ("eagle3", "medusa"):
        return None
    names = eagle3.WEIGHT_FILES if layout == "eagle3" else medusa.WEIGHT_FILES
    for name in names:
        try:
            huggingface_hub.hf_hub_download(repo_id, name)
            return os.path.dirname(config)
        except Exception:
            continue
    raise GumihoError(f"Hub repo {repo_id!r} has a {layout} config.json but none of {', '.join(names)}.")
