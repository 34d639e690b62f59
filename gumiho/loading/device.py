"""Where and in what precision a model runs: the device, the target's dtype, and
the dtype a drafter runs in next to its target."""
from __future__ import annotations

from typing import Optional

import torch

from ..errors import GumihoError
from ..target import Target


def pick_device(device: Optional[str] = None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise GumihoError(f"Unknown device {device!r}; use 'cpu', 'cuda', 'cuda:N' or 'auto'.") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GumihoError(f"Device {device!r} was asked for but no CUDA GPU is available; use --device cpu.")
    return dev


def pick_dtype(dtype: Optional[str], device: torch.device) -> torch.dtype:
    if dtype in (None, "auto"):
        return torch.float16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise GumihoError(f"Unknown dtype {dtype!r}; use one of {sorted(table)} or 'auto'.")
    return table[dtype]


DRAFTER_DTYPES = ("auto", "fp32", "bf16", "fp16")


def drafter_dtype(target: Target, dtype: Optional[str] = None) -> torch.dtype:
    """The dtype a drafter runs in next to ``target``.

    ``auto`` (default): the target's on a GPU; on a CPU bfloat16 where the CPU has
    bf16 matrix instructions, else float32. Drafting on a CPU is bound by reading the
    drafter's weights from memory every step (the target's forward has pushed them
    out of the caches), so half the bytes is a cheaper draft step (measured in
    benchmarks/notes.md). The drafter's dtype never changes the output, which the
    target's verification alone decides; it can change what gets drafted, so
    acceptance may move a little. ``fp32``/``bf16``/``fp16`` force one."""
    from ..cpulinear import available_bf16

    if dtype in (None, "auto"):
        if target.device.type == "cuda":
            return target.dtype
        return torch.bfloat16 if available_bf16() else torch.float32
    if dtype not in DRAFTER_DTYPES:
        raise GumihoError(f"Unknown drafter dtype {dtype!r}; use one of {', '.join(DRAFTER_DTYPES)}.")
    return pick_dtype(dtype, target.device)
