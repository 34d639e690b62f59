"""What the CPU can do, read once from /proc/cpuinfo (Linux; elsewhere: unknown).

Two things depend on it. Training picks bf16 autocast only where the CPU multiplies
bf16 matrices in hardware (see ``gumiho.train.config.mixed_precision``). And speedups
on a CPU are a property of the machine as much as of the drafter: a verify forward
over a tree of 9 tokens costs about 1.2 one-token forwards on an AVX-512 CPU and
about 1.4 on an AVX2-only one, so a benchmark record names the CPU it ran on.
"""
from __future__ import annotations

import functools
import platform

# Flags worth naming in a benchmark record, widest first, with the words people use.
_FEATURES = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def parse_cpuinfo(text: str) -> tuple[str, frozenset]:
    """(model name, flags) of the first CPU that /proc/cpuinfo's text lists."""
    model, flags = "", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return model, flags


@functools.lru_cache(maxsize=1)
def cpu_info() -> tuple[str, frozenset]:
    """(model name, flags) of this machine's CPU; no flags where /proc/cpuinfo is missing."""
    try:
        with open("/proc/cpuinfo") as f:
            model, flags = parse_cpuinfo(f.read())
    except OSError:
        model, flags = "", frozenset()
    return model or platform.processor() or "", flags


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (AVX512-BF16 or AMX).
    There, oneDNN's bf16 matmuls run about 4x faster than float32 ones (2048x576 @
    576x8192, one core of an AVX512-BF16 CPU); without it bf16 is emulated and slower."""
    flags = cpu_info()[1]
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_summary(info: tuple[str, frozenset] | None = None) -> str:
    """e.g. "AMD EPYC, AVX2" or "Intel(R) Xeon(R) ..., AVX2, AVX-512, AVX512-BF16, AMX-BF16"."""
    model, flags = info or cpu_info()
    features = [word for flag, word in reversed(_FEATURES) if flag in flags]
    return ", ".join([model or "unknown CPU", *features])
