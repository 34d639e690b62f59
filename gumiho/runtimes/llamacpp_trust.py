"""Whether the llama.cpp runtime can be trusted on this machine, found before this
process loads it: llama-cpp-python found without importing it, then the runtime's
forwards tried in a child process (gumiho.runtimes.native_probe; the trial is
llamacpp_trial.py: every kind of forward the runtime runs, past 512 cached cells), with the
weight-repack setting this CPU gets by rule.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from ..errors import GumihoError
from ..files import fingerprint
from .native_probe import Outcome, Verdict, advertises, first_usable

log = logging.getLogger("gumiho")


def available() -> bool:
    """Whether llama-cpp-python is installed (it is an optional extra). Found, not
    imported: importing it loads native code, which may die on this CPU (see trust)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


INSTALL = ("pip install llama-cpp-python==0.3.36 (it builds llama.cpp, about ten minutes on two cores), "
           "or use runtime='torch'.")


# Extra buffer types are llama.cpp's weight repacks at load: CPU_REPACK (Q4_0 interleaved for
# AVX2/AVX-512 and NEON kernels) and, where cpuid advertises AMX, the AMX buffer (Q4_0, Q4_1, Q8_0,
# K-quants...). On virtual machines that advertise AMX without letting a guest use it, the AMX
# path kills the process at the first decode: SIGILL (llama.cpp issues 28756, 28328), or on
# another such machine SIGSEGV (a general protection fault in libggml-cpu). Rule, from the
# measurement in docs/llamacpp.md: on where no AMX is advertised (CPU_REPACK is what makes the
# Q4_0 layout fast), off where it is (losing the repack costs the Q4_0 layout its speed, never
# the process).
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")


def extra_buffers_default() -> bool:
    """Whether llama.cpp may repack weights into extra buffer types on this CPU (the rule above)."""
    return not advertises(*AMX_FLAGS)


def repack_words(extra_buffers: bool, asked: Optional[bool] = None, died: str = "") -> str:
    """The weight-repack setting a load got, and why, in words a status line can show:
    ``extra_buffers`` the setting loaded with, ``asked`` the caller's (None: the rule
    above), ``died`` the signal the trial died by with repacking on ("" if it did not)."""
    if died:
        return (f"weight repacking off: with it on, llama.cpp died with {died} in its trial on this CPU "
                f"(a child process), so it loads without")
    if asked is not None:
        return f"weight repacking {'on' if extra_buffers else 'off'}, as asked"
    if extra_buffers:
        return "weight repacking on: this CPU advertises no AMX, and the repack is what makes 4-bit products fast"
    return ("weight repacking off: this CPU advertises AMX, and on some virtual machines that repack kills the "
            "process (SIGILL or SIGSEGV)")


class NativeRuntimeUnusable(GumihoError):
    """A native runtime that died (or failed) in its trial on this machine; ``verdict`` says how."""

    def __init__(self, message: str, verdict: Verdict):
        super().__init__(message)
        self.verdict = verdict


def bindings_key() -> dict:
    """The build of llama-cpp-python installed here: its version and its native libraries
    (the package's lib/ folder, by names, sizes and times), so a rebuilt or reinstalled
    wheel is tried again."""
    spec = importlib.util.find_spec("llama_cpp")
    folder = Path(spec.origin).parent if spec and spec.origin else Path(".")
    try:
        version = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"bindings": version, "libraries": fingerprint(folder / "lib" if (folder / "lib").is_dir() else folder)}


TRIAL_SECONDS = 120  # a trial that has not finished by then is reported, not trusted


TRIAL = Path(__file__).parent / "llamacpp_trial.py"


def _trial(code: str, gguf_path: str, threads: int, extra_buffers: bool, shape: tuple[int, ...]):
    """The runtime's forwards on ``gguf_path``, run in a child process (``code``: the text of
    gumiho/runtimes/llamacpp_trial.py)."""

    def run() -> Outcome:
        command = [sys.executable, "-c", code, gguf_path, "1" if extra_buffers else "0", str(threads),
                   *map(str, shape)]
        try:
            # GGML_NO_BACKTRACE: an abort prints its message and dies, without attaching gdb first.
            done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                                  stdin=subprocess.DEVNULL, timeout=TRIAL_SECONDS,
                                  env={**os.environ, "GGML_NO_BACKTRACE": "1"})
        except subprocess.TimeoutExpired:
            return Outcome(None)
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        info = {}
        if done.returncode == 0 and done.stdout.strip():
            try:
                info = json.loads(done.stdout.strip().splitlines()[-1])
            except ValueError:
                pass
        said = [line for line in lines if "GGML_ASSERT" in line or "GGML_ABORT" in line] or lines or [""]
        return Outcome(done.returncode, said[-1][:300], info)  # a failed assertion names itself
    return run


def trust(gguf_path: str, threads: int, extra_buffers: Optional[bool], shape: tuple[int, ...]) -> Verdict:
    """The verdict on running ``gguf_path`` in llama.cpp here (``shape``: the runtime's KV
    cache type, flash-attention setting, batch sizes, sequence ids and a context length past
    the 512 cells where attention paths divide, so the trial runs its kernels), and with which setting
    (``verdict.setting["extra_buffers"]``): the rule's setting first (or the one asked),
    then, if that died by a signal with extra buffer types on, without them. Costs one
    child process per machine, build, file and setting; nothing after (cached)."""
    first = extra_buffers_default() if extra_buffers is None else bool(extra_buffers)
    settings = [{"extra_buffers": first}] + ([{"extra_buffers": False}] if first else [])
    # Not the threads: a CPU's instructions, not their number. The trial's own text and shape
    # are: a trial that tries more is run again, not answered by an older verdict.
    code = TRIAL.read_text()
    key = {**bindings_key(), "file": fingerprint(gguf_path), "trial": hashlib.sha256(code.encode()).hexdigest()[:16],
           "shape": list(shape)}
    verdict, seen = first_usable("llama.cpp", key,
                                 lambda s: _trial(code, gguf_path, threads, s["extra_buffers"], shape), settings)
    if verdict.usable and len(seen) > 1:
        # No "gumiho:" of its own: the logger's name is gumiho, and every format that names
        # the logger (the app's, a caller's) would print it twice.
        log.warning("%s, with its weight repack on; loading it without (use_extra_bufts=False).", seen[0].reason())
        # Which signal, for the words the load shows (repack_words); the cached verdict is untouched.
        verdict = dataclasses.replace(verdict, info={**(verdict.info or {}), "repack_died": seen[0].signal})
    return verdict


def unusable_message(verdict: Verdict) -> str:
    """What a caller who asked for this runtime by name is told, with what to try."""
    return (f"{verdict.reason()}, so this process did not load it. Use runtime='torch' (float32, unaffected); or "
            f"rebuild llama-cpp-python for this CPU without its native detection: CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" "
            f"pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36 (docs/llamacpp.md).")
