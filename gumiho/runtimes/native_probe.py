"""Native code tried in a child process before this process trusts it.

Why: a native library can die by a signal that no Python code can catch. llama.cpp
built with the machine's own CPU detection turns on every instruction set that cpuid
advertises; on a virtual machine that advertises AMX without letting a guest use it,
its AMX weight repack dies with SIGILL at the first decode, and a wheel or binary built
on one CPU and copied to another dies the same way. Only a child process can try such
code safely: its exit status names the signal (a negative return code in
``subprocess``) while the parent lives on.

So the first time a native runtime is used on a machine, with a given build, file and
setting, :func:`probe` runs a trial of it (the forwards it will run) in a child and keeps the
verdict in the cache folder (gumiho.files.cache_root, ``probes/``), keyed by this
machine's CPU (its model and the flags cpuid reports), the build, the file and the
setting. Later uses read the verdict: nothing is run again until one of those changes.

Only definite verdicts are kept: a trial that finished (usable) and one that died by a
signal (unusable here, until the build or the machine changes). A trial that failed
otherwise (a missing file, a timeout) is reported and tried again next time.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Callable, Optional

from ..files import cache_root

PROBE_VERSION = 1  # part of every key: a changed trial re-probes


@dataclass(frozen=True)
class Outcome:
    """What one trial did: its exit status (negative: killed by that signal, as
    ``subprocess`` reports it), the last words it wrote, and what it reported of itself."""

    returncode: Optional[int]  # None: it did not finish in time
    words: str = ""
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """Whether a native runtime can be trusted on this machine, and why not."""

    runtime: str  # "llama.cpp" (the bindings, in this process) or "llama-server"
    usable: bool
    signal: str = ""  # "SIGILL" when the trial died by a signal
    detail: str = ""  # the trial's own last words, or what went wrong otherwise
    seconds: float = 0.0  # what the trial cost when it ran; 0 when read from the cache
    cached: bool = False
    setting: dict = field(default_factory=dict)  # the setting tried (llama.cpp: extra buffer types on or off)
    info: dict = field(default_factory=dict)  # what the trial reported (llama.cpp: the features it was built for)

    def reason(self) -> str:
        """One sentence for a user: what died, how, where."""
        if self.usable:
            return f"{self.runtime} runs on this CPU."
        if self.signal:
            said = f" ({self.detail})" if "GGML" in self.detail else ""  # a failed assertion, in its own words
            return (f"{self.runtime} died with {self.signal} ({signal_words(self.signal)}) on this CPU in a trial "
                    f"run in a child process{said}")
        return f"{self.runtime} failed its trial on this machine: {self.detail or 'no reason given'}"


def signal_words(name: str) -> str:
    """'illegal instruction' for 'SIGILL': the C library's own description."""
    try:
        return signal.strsignal(signal.Signals[name]).lower()
    except (KeyError, ValueError, AttributeError):
        return "killed by a signal"


def signal_name(returncode: Optional[int]) -> str:
    """The signal that killed a child, from ``subprocess``'s return code ('' if none)."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


@lru_cache(maxsize=1)
def cpu_signature() -> dict:
    """What identifies this CPU to a native build: the machine, the model name and the
    instruction-set flags the kernel reports (Linux: /proc/cpuinfo; elsewhere the
    platform's processor string, which is less exact but still tells machines apart)."""
    model, flags = "", []
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = sorted(set(value.split()))
                elif not line.strip() and flags:
                    break  # the first processor's block is enough
    except OSError:
        pass
    return {"machine": platform.machine(), "model": model or platform.processor(), "flags": flags}


def advertises(*flags: str) -> bool:
    """Whether this CPU reports any of ``flags`` (e.g. 'amx_tile')."""
    have = set(cpu_signature()["flags"])
    return any(f in have for f in flags)


def verdict_path(runtime: str, key: dict) -> str:
    """Where the verdict for ``key`` (build, file, setting), on this CPU, is kept."""
    whole = {"probe": PROBE_VERSION, "runtime": runtime, "cpu": cpu_signature(), **key}
    digest = hashlib.sha256(json.dumps(whole, sort_keys=True, default=str).encode()).hexdigest()[:20]
    safe = "".join(c if c.isalnum() else "-" for c in runtime)
    return str(cache_root() / "probes" / f"{safe}-{digest}.json")


def _read(path: str) -> Optional[Verdict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        data.update(seconds=0.0, cached=True)
        return Verdict(**data)
    except (OSError, ValueError, TypeError):
        return None


def _keep(path: str, verdict: Verdict) -> None:
    """Written whole or not at all (a reader never sees half a verdict); a cache folder
    that cannot be written only means the trial runs again next time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{os.getpid()}.part"
        with open(part, "w", encoding="utf-8") as f:
            json.dump(asdict(verdict), f, indent=1)
        os.replace(part, path)
    except OSError:
        pass


def probe(runtime: str, key: dict, trial: Callable[[], Outcome], setting: Optional[dict] = None) -> Verdict:
    """The verdict on ``runtime`` with ``setting`` on this machine: read from the cache,
    or found by running ``trial`` (which must run the native code in a child process)
    and kept when it is definite."""
    setting = dict(setting or {})
    path = verdict_path(runtime, {**key, "setting": setting})
    known = _read(path)
    if known is not None:
        return known
    started = time.perf_counter()
    outcome = trial()
    seconds = round(time.perf_counter() - started, 2)
    died = signal_name(outcome.returncode)
    if outcome.returncode == 0:
        verdict = Verdict(runtime, True, seconds=seconds, setting=setting, info=outcome.info)
    elif died:
        verdict = Verdict(runtime, False, signal=died, detail=outcome.words, seconds=seconds, setting=setting,
                          info=outcome.info)
    else:
        what = "it did not finish in time" if outcome.returncode is None else f"it exited with code {outcome.returncode}"
        return Verdict(runtime, False, detail=f"{what}" + (f": {outcome.words}" if outcome.words else ""),
                       seconds=seconds, setting=setting, info=outcome.info)  # not definite: not kept
    _keep(path, verdict)
    return verdict


def first_usable(runtime: str, key: dict, trial_for: Callable[[dict], Callable[[], Outcome]],
                 settings: list) -> tuple[Verdict, list[Verdict]]:
    """Probe ``settings`` in order of preference until one is usable. Returns the
    verdict to act on (the first usable one, else the first one tried) and every
    verdict, in order. A later setting is tried only after a death by a signal: a
    failure of another kind (a bad file) would fail every setting alike."""
    seen: list[Verdict] = []
    for setting in settings:
        verdict = probe(runtime, key, trial_for(setting), setting)
        seen.append(verdict)
        if verdict.usable or not verdict.signal:
            break
    usable = [v for v in seen if v.usable]
    return (usable[0] if usable else seen[0]), seen
