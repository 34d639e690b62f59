"""Files this project keeps outside a clone, and how it checks them: the one cache
folder (the default target converted from its GGUF file, rewritten GGUF layouts, the vLLM
environment, vLLM exports, native runtimes' verdicts), a file's SHA-256 (a cached file
against its record, a data file a resumable run was started on) and a cheaper key of a
file or folder as it is now (its sizes and times).

Where the cache folder is, and the other paths outside a clone, is set once by the entry
point (gumiho.files.paths: the commands and the app read ``GUMIHO_CACHE`` and the others
from their environment); the library reads no environment."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from .paths import LibraryPaths, configure, configured


def cache_root(paths: Optional[LibraryPaths] = None) -> Path:
    """The cache folder of ``paths``, else of the configured paths: ``GUMIHO_CACHE`` where
    the entry point read one, else ``$XDG_CACHE_HOME/gumiho``, else ``~/.cache/gumiho``."""
    return (paths or configured()).cache_root


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


__all__ = ["LibraryPaths", "cache_root", "configure", "configured", "file_sha256", "fingerprint"]
