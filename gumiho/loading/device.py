"""Where and in what precision a model runs: the device, the target's dtype, and
the dtype a drafter runs in next to its target."""
from __future__ import annotations

from typing import Optional

import torch

from ..engine.target import Target
from ..errors import GumihoError


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


DRAFTER_DTYPES = ("auto", "fp32", "bf16", "fp16", "int4")


def drafter_dtype(target: Target, dtype: Optional[str] = None) -> torch.dtype:
    """The dtype a drafter runs in next to ``target``.

    ``auto`` (default): the target's on a GPU; on a CPU bfloat16 where the CPU has
    bf16 matrix instructions, else float32. Drafting on a CPU is bound by reading the
    drafter's weights from memory every step (the target's forward has pushed them
    out of the caches), so half the bytes is a cheaper draft step (measured in
    benchmarks/notes.md). The drafter's dtype never changes the output, which the
    target's verification alone decides; it can change what gets drafted, so
    acceptance may move a little. ``fp32``/``bf16``/``fp16`` force one; ``int4`` is
    bfloat16 with 4-bit products (:func:`drafter_int4`)."""
    from ..kernels.cpulinear import available_bf16

    if dtype == "int4":
        drafter_int4(target, dtype)  # refuses where it cannot run
        return torch.bfloat16
    if dtype in (None, "auto"):
        if target.device.type == "cuda":
            return target.dtype
        return torch.bfloat16 if available_bf16() else torch.float32
    if dtype not in DRAFTER_DTYPES:
        raise GumihoError(f"Unknown drafter dtype {dtype!r}; use one of {', '.join(DRAFTER_DTYPES)}.")
    return pick_dtype(dtype, target.device)


def drafter_int4(target: Target, dtype: Optional[str] = None) -> bool:
    """Whether a drafter next to ``target`` drafts through 4-bit copies of its weights
    (gumiho.kernels.int4linear). ``auto``: where the target's runtime multiplies quantized
    weights (llama.cpp) and the CPU takes the 4-bit kernel; there a one-token forward
    is cheap and the drafter's step, bound by reading its weights, is a quarter of a
    speculative step (research/runtime_step.py). ``int4`` asks for it and refuses,
    in words, where it cannot run; any other dtype: no."""
    from ..kernels.int4linear import available

    if dtype == "int4":
        if target.device.type != "cpu" or not available():
            raise GumihoError("A 4-bit drafter (drafter dtype 'int4') needs a CPU with bfloat16 instructions "
                              "(AVX512-BF16) and PyTorch's CPU int4 kernel; use 'auto', 'bf16' or 'fp32' here.")
        return True
    return dtype in (None, "auto") and target.device.type == "cpu" and target.runtime.quantized and available()
