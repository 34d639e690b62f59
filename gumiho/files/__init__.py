"""Files this project keeps outside a clone, and how it checks them: the one cache
folder (rewritten GGUF layouts, the vLLM environment, vLLM exports) and a file's
SHA-256 (a cached file against its record, a data file a resumable run was started on)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """``$GUMIHO_CACHE`` if set, else ``$XDG_CACHE_HOME/gumiho``, else ``~/.cache/gumiho``."""
    chosen = os.environ.get("GUMIHO_CACHE", "").strip()
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "gumiho"


def file_sha256(path) -> str:
    """The hex SHA-256 of a file's bytes, read a megabyte at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
