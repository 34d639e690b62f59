"""Keys of what the serve commands export into the cache folder: a change to the
source, the target or the exporting code writes a new export instead of reusing one
it may no longer match."""
from __future__ import annotations

import hashlib
from pathlib import Path


def fingerprint(path: str) -> str:
    """A key for a source file or folder: its absolute path and its files' sizes and times."""
    root = Path(path).expanduser().resolve()
    digest = hashlib.sha256(str(root).encode())
    files = [root] if root.is_file() else sorted(p for p in root.iterdir() if p.is_file()) if root.is_dir() else []
    for f in files:
        st = f.stat()
        digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def code_key(*modules: str) -> str:
    """A key for the code that writes an export (files of the gumiho package, named
    relative to it)."""
    here = Path(__file__).resolve().parent.parent  # gumiho/
    digest = hashlib.sha256()
    for module in modules:
        digest.update((here / module).read_bytes())
    return digest.hexdigest()[:8]
