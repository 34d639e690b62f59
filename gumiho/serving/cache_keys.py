"""Keys of what the serve commands export into the cache folder: a change to the
source, the target (gumiho.files.fingerprint) or the exporting code (code_key) writes
a new export instead of reusing one it may no longer match."""
from __future__ import annotations

import hashlib
from pathlib import Path


def code_key(*modules: str) -> str:
    """A key for the code that writes an export (files of the gumiho package, named
    relative to it)."""
    here = Path(__file__).resolve().parent.parent  # gumiho/
    digest = hashlib.sha256()
    for module in modules:
        digest.update((here / module).read_bytes())
    return digest.hexdigest()[:8]
