"""Files this project keeps outside a clone, and how it checks them: the one cache
folder (rewritten GGUF layouts, the vLLM environment, vLLM exports, native runtimes'
verdicts), a file's SHA-256 (a cached file against its record, a data file a resumable
run was started on) and a cheaper key of a file or folder as it is now (its sizes and times)."""
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


def fingerprint(path: str) -> str:
    """A key for a source file or folder: its absolute path and its files' sizes and times."""
    root = Path(path).expanduser().resolve()
    digest = hashlib.sha256(str(root).encode())
    files = [root] if root.is_file() else sorted(p for p in root.iterdir() if p.is_file()) if root.is_dir() else []
    for f in files:
        st = f.stat()
        digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]
