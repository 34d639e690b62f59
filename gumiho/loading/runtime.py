"""Which runtime a load uses (gumiho.runtimes): asked by name, with 'auto' (the
default) resolved to llama.cpp where it runs the embedded file and to the torch
runtime everywhere else. The library reads no environment for it: the command-line
entry points and the app read GUMIHO_RUNTIME and pass it down."""
from __future__ import annotations

from typing import Optional

import torch

from ..errors import GumihoError
from ..runtimes.llamacpp import available as llamacpp_available

RUNTIMES = ("auto", "torch", "llama.cpp")
RUNTIME_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "float32": "torch", "": "auto"}


def pick_runtime(runtime: Optional[str]) -> str:
    """'auto', 'torch' or 'llama.cpp', as asked (None or "": 'auto').
    :func:`resolve_runtime` turns 'auto' into one of the other two."""
    if not isinstance(runtime, (str, type(None))):
        raise GumihoError(f"runtime must be a name ('auto', 'torch' or 'llama.cpp'); got {runtime!r}.")
    name = (runtime or "auto").strip().lower()
    name = RUNTIME_ALIASES.get(name, name)
    if name not in RUNTIMES:
        raise GumihoError(f"Unknown runtime {runtime!r}: use 'auto' (the default), 'torch' (float32, any model) or "
                          f"'llama.cpp' (the embedded GGUF file as stored, on a CPU).")
    return name


def resolve_runtime(runtime: str, embedded_gguf: bool, device: torch.device) -> str:
    """The runtime a load uses. 'auto' is llama.cpp where it runs and is faster: the
    embedded GGUF on a CPU, with llama-cpp-python installed (vanilla decodes about 3.5x
    faster there and every speculative method runs faster than on float32 weights;
    docs/llamacpp.md has the measurements); the torch runtime everywhere else."""
    if runtime != "auto":
        return runtime
    return "llama.cpp" if embedded_gguf and device.type == "cpu" and llamacpp_available() else "torch"
