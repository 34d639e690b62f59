"""The models the app serves: the default target loaded in a background thread
(so the page is up long before the model is), the drafters for it (trained ones
picked up as soon as they appear on disk, a random one with a notice until then),
and at most one other target that a user asked for in the advanced box."""
from __future__ import annotations

import dataclasses
import gc
import logging
import os
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gumiho import Drafter, GenerationSettings, GumihoError, Target, stream, with_copy
from gumiho.loading import (
    DEFAULT_TARGET_LABEL,
    llamacpp_available,
    load_drafter,
    load_target,
    pick_runtime,
    random_drafter,
    resolve_runtime,
    shipped_drafter_path,
)
from gumiho.proposers import LearnedProposer

from ..core import zerogpu
from ..core.access import Access, is_default
from ..core.forms import DRAFTER_KINDS, DRAFTER_LABELS, WEIGHTS_AS_STORED
from ..core.settings import AppSettings
from ..core.worker import ModelThread
from .loadable import check_drafter_loadable, check_loadable, load_drafter_as_typed

log = logging.getLogger("gumiho.app")

RANDOM_NOTICE = ("No trained {kind} drafter is shipped yet, so this one has random weights: nearly every draft is "
                 "rejected and Gumiho runs slower than vanilla. The text is still exactly the target's.")
CUSTOM_RANDOM_NOTICE = ("No drafter path was given for {model}, so its drafter has random weights: expect almost no "
                        "accepted drafts. Train one with `python -m gumiho.train` and give its folder.")


@dataclass
class Resolved:
    target: Target
    drafter: Drafter
    trained: bool
    note: str  # shown beside the Gumiho column; "" for a trained drafter
    drafter_label: str
    # The model as loaded, when the race runs on another view of it (app.race.run measures
    # its vanilla decoding after the race, as the fastest way to run the model here).
    fastest: Optional[Target] = None


def runs_on(target: Target, drafter: Drafter, weights: str, label: str) -> Target:
    """The target a request's both sides run on. float32, and the page's default (""):
    the torch view, free (it shares the model), where a verify over a few tokens costs
    about one forward and the race shows the whole hybrid drafter at work. As stored:
    the model as loaded, which must run its file in llama.cpp, and whose runtime must
    be able to feed the drafter (it says so in words when it cannot)."""
    if weights != WEIGHTS_AS_STORED:
        return target.torch_view()
    if target.torch_view() is target:  # the load found no other runtime for it
        why = (target.runtime_note if target.runtime_note else
               "llama-cpp-python is not installed on this server" if not llamacpp_available()
               else "only the default model runs as stored")
        raise GumihoError(f"The 4-bit weights as stored need the llama.cpp runtime, and {why}; choose float32 "
                          f"weights.")
    try:
        target.runtime.check_proposer(LearnedProposer(drafter))
    except GumihoError:
        raise GumihoError(f"The {label} drafter reads the target's inner layers, which the 4-bit runtime does not "
                          f"hand out; choose float32 weights for it.") from None
    return target


def fastest_target(target: Target, race_target: Target) -> Optional[Target]:
    """The model as loaded, when the race runs on another view of it: its runtime is
    the fastest way to run the model on this machine (vanilla on the 4-bit file), shown
    beside the race's two lanes."""
    return target if race_target is not target else None


def runtime_for(settings: AppSettings) -> str:
    """The runtime the default model loads on here ("llama.cpp" or "torch"): the app's one
    decision of it, from the operator's ``settings.runtime`` (None: the library's "auto"
    rule) and this server's device. An unknown name is "torch" here; the load reports it."""
    try:
        return resolve_runtime(pick_runtime(settings.runtime), True, torch.device(zerogpu.model_device()))
    except GumihoError:
        return "torch"


def load_default(settings: AppSettings) -> Target:
    """The default model as this server runs it: on its device, with the runtime and
    4-bit layout its operator asked for (``settings.runtime``, ``settings.layout``)."""
    return load_target(None, device=zerogpu.model_device(), runtime=settings.runtime, layout=settings.layout)


def _random_drafter(target: Target, kind: str) -> Drafter:
    with torch.random.fork_rng(devices=[]):  # the same weights every time, and no trace in the caller's draws
        return random_drafter(target, kind, seed=1234)


class ModelHub:
    """Loads and hands out targets and drafters, and owns the one thread that
    runs every piece of model work (loading, warm-up, generations). One thread
    means generations never overlap even if a request bypasses the queue, and
    all model memory comes from one allocator pool, so the process stays flat
    however many sessions take turns."""

    def __init__(self, default_loader: Optional[Callable[[], Target]] = None, warmup: bool = True,
                 access: Optional[Access] = None, max_waiting: Optional[int] = None,
                 settings: Optional[AppSettings] = None):
        # The server's settings (the app's as shipped unless an entry point read the
        # operator's); ``access`` and ``max_waiting``, where given, override theirs.
        settings = settings or AppSettings()
        if access is not None:
            settings = dataclasses.replace(settings, access=access)
        if max_waiting:
            settings = dataclasses.replace(settings, max_waiting=max_waiting)
        self.settings = settings
        self.access = settings.access
        self._default_loader = default_loader or (lambda: load_default(settings))
        self.runtime = runtime_for(settings)  # the runtime the default model runs on (app.race.settings offers it)
        self._warmup = warmup
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self.state = "idle"  # idle, loading, ready, error
        self.error = ""
        self.load_s = 0.0
        self.default: Optional[Target] = None
        self._drafters: dict = {}  # (target key, kind) -> (source key, Drafter, trained)
        self._custom: Optional[tuple[str, Target]] = None
        self._started = False
        self._worker = ModelThread(settings.max_waiting)
        # A hub dropped without close() still ends its thread once collected (the
        # thread holds the worker, never the hub).
        weakref.finalize(self, self._worker.close)
        self.gpu_key = zerogpu.remember_hub(self)  # how a ZeroGPU worker finds its copy of this hub

    # -- the default target, in the background -----------------------------------------

    def start(self) -> "ModelHub":
        """Start loading the default model: on the model thread, behind the page; on
        a ZeroGPU Space here and now, on the calling (main) thread, where `spaces`
        patched torch, and before the server launches (app/core/zerogpu.py says why)."""
        with self._lock:
            if self._started:
                return self
            self._started = True
            self.state = "loading"
        if zerogpu.ZERO_GPU:
            self._load_default()
        else:
            self._worker.submit(self._load_default, measured=False)
        return self

    def submit(self, fn, size: float = 128.0) -> Future:
        """Run ``fn()`` on the model thread, after what is queued; ``size``: its work (app.core.worker)."""
        return self._worker.submit(fn, size=size)

    def close(self, wait_s: float = 0.0) -> bool:
        """End the model thread once its running job (if any) is done; what still waits
        is cancelled. Idempotent. Says whether the thread has ended within ``wait_s``."""
        return self._worker.close(wait_s)

    @property
    def closed(self) -> bool:
        return self._worker.closed

    def place(self, future: Future):
        """Where a submitted job stands in the model thread's line (app.core.worker.Place)."""
        return self._worker.place(future)

    def _load_default(self):
        t0 = time.perf_counter()
        try:
            target = self._default_loader()
            with self._lock:
                self.default = target
            drafter = self.resolve("", "gumiho", "").drafter
            # On ZeroGPU this process has no GPU (its "cuda" tensors are stand-ins), so
            # there is nothing here to warm: every GPU worker starts afresh.
            if self._warmup and not zerogpu.ZERO_GPU:
                self._warm(target, drafter)
            self.load_s = time.perf_counter() - t0
            self.state = "ready"
            log.info("model ready in %.1f s", self.load_s)
        except Exception as e:  # shown in the page; the app keeps serving
            log.exception("the default model failed to load")
            self.error = str(e) if isinstance(e, GumihoError) else f"{type(e).__name__}: {e}"
            self.state = "error"
        finally:
            self._ready.set()

    @staticmethod
    def _warm(target: Target, drafter: Drafter):
        """One short vanilla and one short speculative generation on each runtime the
        page can race (the model's own and its float32 view), each with that runtime's
        tree (the race's default: TreeSettings.for_target, which the library picks when
        no tree is given), so the first timed race does not pay for first-call
        allocations."""
        ids = target.encode("Hello!")
        views = [target.torch_view()] + ([target] if target.torch_view() is not target else [])
        for view in views:
            for d in (None, drafter):
                for _ in stream(view, ids, d, GenerationSettings(max_new_tokens=3)):
                    pass

    @property
    def native_note(self) -> str:
        """Why the default model is not on its 4-bit runtime here ("" when it is, or
        when it was never meant to be): that runtime died in its trial on this machine."""
        return self.default.runtime_note if self.default is not None else ""

    @property
    def runtime_choice(self) -> str:
        """The default model's runtime as loaded, with its load setting and why, when that
        is the 4-bit runtime ("" otherwise): the 4-bit choice's hint on the page."""
        d = self.default
        return d.runtime_choice if d is not None and getattr(d.runtime, "quantized", False) else ""

    def wait_ready(self, timeout: Optional[float] = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def status(self) -> tuple[str, str]:
        """(level, text) for the banner."""
        name = self.default.name if self.default is not None else DEFAULT_TARGET_LABEL
        if self.state in ("idle", "loading"):
            return "loading", (f"Loading {name} and its drafter in the background (about 20–60 s on 2 CPU cores). "
                               f"The page works meanwhile; the Run buttons switch on when the model is ready.")
        if self.state == "error":
            return "error", (f"The default model could not load: {self.error} The app keeps serving: give another "
                             f"model in the advanced box.")
        dev = self.default.device.type if self.default is not None else "cpu"
        text = f"Ready: {name} on {dev} (loaded in {self.load_s:.0f} s)."
        if self.default is not None and not self.native_note:
            # Which runtime, with what load setting and why: a choice made on this CPU, said aloud.
            text += f" It runs {self.default.runtime_choice}."
        if self.native_note:
            return "warn", (text + f" The 4-bit runtime is off on this server: {self.native_note}, so the races "
                            f"run on float32 weights (the torch runtime).")
        if "gumiho" not in self.shipped_kinds():
            return "warn", text + " " + RANDOM_NOTICE.format(kind="Gumiho")
        return "ready", text

    # -- drafters ------------------------------------------------------------------------

    @staticmethod
    def shipped_kinds() -> list[str]:
        return [k for k in DRAFTER_KINDS if shipped_drafter_path(k)]

    def drafter_choices(self) -> list[tuple[str, str]]:
        """The Gumiho drafter always (random until a trained one ships), the
        all-serial and all-parallel ablations and the EAGLE-2 baseline once they
        are shipped."""
        shipped = self.shipped_kinds()
        out = []
        for k in DRAFTER_KINDS:
            if k == "gumiho" or k in shipped:
                label = DRAFTER_LABELS[k] + ("" if k in shipped else ", untrained")
                out.append((label, k))
        return out

    def _drafter_for(self, target: Target, target_key: str, kind: str, path: str) -> tuple[Drafter, bool, str]:
        """(drafter, trained, source). A given path wins; for the default target the
        shipped folder is used as soon as it exists (and reloaded when it changes)."""
        if path:
            folder = os.path.expanduser(path)
            source, trained = folder, True
        elif target_key == "":
            folder = shipped_drafter_path(kind)
            source, trained = (folder, True) if folder else ("random", False)
        else:
            folder, source, trained = None, "random", False
        if folder:
            try:
                stamp = os.path.getmtime(os.path.join(folder, "model.safetensors"))
            except OSError:
                stamp = 0.0
            source = f"{folder}@{stamp}"
        key = (target_key, kind if not path else "path")
        cached = self._drafters.get(key)
        if cached is not None and cached[0] == source:
            return cached[1], cached[2], source
        if folder and path:
            check_drafter_loadable(path, self.access)
            drafter = load_drafter_as_typed(path, folder, target)
        elif folder:
            drafter = load_drafter(folder, target)
        else:
            drafter = _random_drafter(target, kind)
        self._drafters[key] = (source, drafter, trained)
        return drafter, trained, source

    # -- what a request gets -------------------------------------------------------------

    def resolve(self, target_id: str = "", kind: str = "gumiho", drafter_path: str = "",
                copy: bool = False, weights: str = "") -> Resolved:
        """The target and drafter for one request; with ``copy``, the drafter has the
        copy proposer beside it (gumiho.proposers.copying); ``weights`` (app.core.forms.RACE_WEIGHTS,
        or "" for the default, float32) picks the runtime the default model runs on,
        and the target returned is the one both sides of a comparison run on. Raises
        GumihoError with a message for the user when they cannot load."""
        with self._lock:
            if is_default(target_id):
                if self.default is None:
                    if self.state == "error":
                        raise GumihoError(f"The default model could not load ({self.error}); give another model "
                                          f"in the advanced box.")
                    raise GumihoError("The model is still loading; try again in a few seconds.")
                target, key = self.default, ""
            else:
                target, key = self._custom_target(target_id.strip()), target_id.strip()
            drafter, trained, _ = self._drafter_for(target, key, kind, drafter_path)
            if drafter.cfg.kind != kind and not drafter_path:
                raise GumihoError(f"The drafter found for {kind!r} is a {drafter.cfg.kind!r} drafter.")
            label = DRAFTER_LABELS.get(drafter.cfg.kind, drafter.cfg.kind)
            if trained:
                note = ""
            elif key == "":
                note = RANDOM_NOTICE.format(kind=DRAFTER_LABELS[kind].split(" (")[0])
            else:
                note = CUSTOM_RANDOM_NOTICE.format(model=target.name)
            race_target = runs_on(target, drafter, weights, label)
            if copy:
                drafter, label = with_copy(drafter), f"{label} + copying from the context"
            return Resolved(race_target, drafter, trained, note, label, fastest_target(target, race_target))

    def _custom_target(self, name: str) -> Target:
        if self._custom is not None and self._custom[0] == name:
            return self._custom[1]
        check_loadable(name, self.access)
        # Only one extra model at a time: free the previous one (and its drafters) first.
        if self._custom is not None:
            old = self._custom[0]
            self._custom = None
            for k in [k for k in self._drafters if k[0] == old]:
                del self._drafters[k]
            gc.collect()
        try:
            target = load_target(name)
        except GumihoError:
            raise
        except Exception as e:  # anything else a foreign model can throw
            raise GumihoError(f"Could not load model {name!r}: {type(e).__name__}: {str(e)[:300]}") from None
        self._custom = (name, target)
        return target
