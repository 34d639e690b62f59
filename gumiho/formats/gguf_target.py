"""The target's GGUF file, for what runs a target from its file (llama.cpp's server, the
GGUF export): the embedded default's, or a file a user names, checked to be a GGUF."""
from __future__ import annotations

import os
from typing import Optional

from ..errors import GumihoError


def default_target_file() -> str:
    from ..loading.assets import default_target_files

    folder, name = default_target_files()
    return os.path.join(folder, name)


def check_target_file(target: Optional[str]) -> str:
    """The target's GGUF path, checked: a file that starts with GGUF's magic."""
    if target is None:
        return default_target_file()
    path = os.path.expanduser(target)
    if os.path.isdir(path):
        raise GumihoError(f"--target {target!r} is a folder; llama.cpp serves a GGUF file. Convert a transformers "
                          f"folder with llama.cpp's convert_hf_to_gguf.py (in llama.cpp's source), then give the "
                          f".gguf file.")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError:
        raise GumihoError(f"--target {target!r}: no such file.") from None
    if magic != b"GGUF":
        raise GumihoError(f"--target {target!r} is not a GGUF file (it does not start with GGUF's magic bytes).")
    return path
