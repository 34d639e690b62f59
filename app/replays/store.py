"""Where replayed runs come from: :class:`Recordings` (the example prompts' runs,
recorded once) and :class:`SharedRuns` (finished live runs, by run id).

Both hold the result objects the tabs compute (a race's RaceResult, a walkthrough's
Walk, a comparison's or a losslessness check's result), pickled: a replay draws the
page and answers the API from exactly what a live run would have produced. Only the
app's own files are ever unpickled (the recording shipped with it, and the folder
its operator gives for shared runs, written by the app itself); a visitor names a
run by a 32-digit hexadecimal id, never by a path.

A recording is valid only for the setup it was made with: the same default target,
runtime and weights, the same shipped drafters (by their files' SHA-256), and the same
request (prompt and every setting, :func:`request_key`). A file made with another
setup is refused as a whole at load, with one line in the log, and every example then
runs live until ``python -m app.web.record`` writes it again.
"""
from __future__ import annotations

import dataclasses
import datetime
import gzip
import json
import logging
import os
import pickle
import platform
import re
import threading
from collections import OrderedDict
from typing import Optional

import gradio as gr

from gumiho import __version__
from gumiho.drafter.kinds import DRAFTER_KINDS
from gumiho.files import file_sha256
from gumiho.loading import shipped_drafter_path

from ..views.render import render_banner

log = logging.getLogger("gumiho.app")

RECORDED, LIVE = "recorded", "live"  # a result's ``source``, as the API says it
FORMAT = 1  # the recording file's layout; another one is refused like another setup
RUN_ID = re.compile(r"[0-9a-f]{32}")


# The app's package as imported here: "app" in a clone, "gumiho.app" from the wheel. A
# pickle names the classes of the clone or the wheel that wrote it; :class:`_Unpickler`
# maps either to this one, and refuses every module outside what a result holds.
APP = __name__.rsplit(".", 2)[0]
TRUSTED = ("builtins", "collections", "copyreg", "datetime", "enum", "numpy", "torch", "gumiho", "_codecs")
# Library modules that moved after recordings named them (issue 78: the engine and the lab
# got rooms of their own): a recording made before still loads, its classes found where they live now.
MOVED = {"gumiho.decode": "gumiho.engine.decode", "gumiho.events": "gumiho.engine.events",
         "gumiho.metrics": "gumiho.engine.metrics", "gumiho.target": "gumiho.engine.target",
         "gumiho.verifycost": "gumiho.engine.verifycost", "gumiho.verify": "gumiho.engine.acceptance",
         "gumiho.rules": "gumiho.lab.rules", "gumiho.lossless": "gumiho.lab.lossless",
         "gumiho.speedmodel": "gumiho.lab.speedmodel"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        for app in ("gumiho.app", "app"):
            if module == app or module.startswith(app + "."):
                module = APP + module[len(app):]
                break
        else:
            if module.split(".")[0] not in TRUSTED:
                raise pickle.UnpicklingError(f"a recorded run does not hold {module}.{name}")
            module = MOVED.get(module, module)
        return super().find_class(module, name)


def _load(f):
    return _Unpickler(f).load()


def request_key(kind: str, request) -> str:
    """One string for a checked request of ``kind`` (race, walkthrough, compare,
    lossless): its every field, so that any setting moved away from the recorded
    one makes the run live."""
    fields = dataclasses.asdict(request) if dataclasses.is_dataclass(request) else dict(request)
    if fields.get("target_weights") == "":  # the default weights, named as the page names them
        fields["target_weights"] = "float32"
    return kind + ":" + json.dumps(fields, sort_keys=True, default=repr)


def setup_of(hub) -> dict:
    """What a recording's results depend on besides the request: the default target
    as loaded (name, runtime, weights) and the shipped drafters' files."""
    target = hub.default
    drafters = {}
    for kind in DRAFTER_KINDS:
        folder = shipped_drafter_path(kind)
        drafters[kind] = file_sha256(os.path.join(folder, "model.safetensors"))[:16] if folder else ""
    return {"format": FORMAT, "library": __version__, "target": target.name if target else "",
            "runtime": target.runtime.name if target else "", "weights": target.runtime.weights if target else "",
            "drafters": drafters}


def machine_words() -> str:
    """The CPU and its cores, as a replay names the machine it was recorded on."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    name = re.sub(r"\s+", " ", name or platform.processor() or platform.machine() or "an unnamed CPU")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{name}, {cores} cores"


class Recordings:
    """The example prompts' recorded runs, by (kind, request key)."""

    def __init__(self, setup: dict, recorded_on: str = "", runs: Optional[dict] = None):
        self.setup = setup
        self.recorded_on = recorded_on  # "<CPU>, <n> cores on <date>"
        self.runs: dict = dict(runs or {})

    def get(self, kind: str, request):
        """The recorded result for this request, or None (not recorded: run it live)."""
        return self.runs.get(request_key(kind, request))

    def add(self, kind: str, request, result) -> None:
        self.runs[request_key(kind, request)] = result

    def __len__(self) -> int:
        return len(self.runs)

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".part"
        with gzip.open(tmp, "wb", compresslevel=9) as f:
            pickle.dump({"setup": self.setup, "recorded_on": self.recorded_on, "runs": self.runs}, f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, setup: dict) -> "Recordings":
        """The recordings at ``path`` if they were made with ``setup``; else none (every
        example runs live), with one line in the log saying why."""
        if not path or not os.path.exists(path):
            return cls(setup)
        try:
            with gzip.open(path, "rb") as f:
                saved = _load(f)
            made_with, recorded_on, runs = saved["setup"], saved["recorded_on"], saved["runs"]
        except Exception as e:  # a damaged or foreign file: the examples run live
            log.warning("recordings %s not used (%s: %s); the examples run live", os.path.basename(path),
                        type(e).__name__, e)
            return cls(setup)
        if made_with != setup:
            differ = sorted(k for k in set(made_with) | set(setup) if made_with.get(k) != setup.get(k))
            log.warning("recordings %s not used: made with another %s than this app has; the examples run live "
                        "(python -m app.web.record writes them again)", os.path.basename(path),
                        ", ".join(differ))
            return cls(setup)
        return cls(setup, recorded_on, runs)


def recorded_note(recorded_on: str, what: str) -> str:
    """The banner of a recorded answer: it is a replay, of what, recorded where and when."""
    return (f"Recorded on {recorded_on}: this example's {what}, computed once and shown to everyone who clicks it. "
            f"Run it live to compute it again on this machine, now.")


def shown_as_recorded(out: dict, recorded_on: str, what: str) -> dict:
    """A tab's outputs for a recorded example: its status led by the banner that says it
    is a recording (:func:`recorded_note`), and the *Run it live* button shown."""
    return {**out, "status": render_banner(recorded_note(recorded_on, what), "info") + out.get("status", ""),
            "live_btn": gr.Button(visible=True)}


def today() -> str:
    return datetime.date.today().isoformat()


class SharedRuns:
    """Finished live runs by run id, so that a link can replay one for anyone: the
    last ``limit`` in memory, and every one in ``folder`` when the app is given one."""

    def __init__(self, limit: int = 50, folder: str = ""):
        self._runs: "OrderedDict[str, tuple[str, object]]" = OrderedDict()
        self._lock = threading.Lock()
        self.limit = max(1, limit)
        self.folder = folder

    def put(self, run_id: str, kind: str, result) -> None:
        if not RUN_ID.fullmatch(run_id or ""):
            raise ValueError(f"not a run id: {run_id!r}")
        with self._lock:
            self._runs[run_id] = (kind, result)
            self._runs.move_to_end(run_id)
            while len(self._runs) > self.limit:
                self._runs.popitem(last=False)
        if self.folder:
            try:
                os.makedirs(self.folder, exist_ok=True)
                path = os.path.join(self.folder, run_id + ".pkl.gz")
                with gzip.open(path + ".part", "wb") as f:
                    pickle.dump((kind, result), f)
                os.replace(path + ".part", path)
            except OSError as e:  # the run stays shareable from memory
                log.warning("shared run not written to its folder (%s)", e)

    def get(self, run_id: str, kind: str):
        """The run shared under ``run_id`` if it is of ``kind``; None for anything else
        (an id that is not one, an unknown or forgotten run, another kind)."""
        if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
            return None
        with self._lock:
            found = self._runs.get(run_id)
        if found is None and self.folder:
            path = os.path.join(self.folder, run_id + ".pkl.gz")
            try:
                with gzip.open(path, "rb") as f:
                    found = _load(f)
            except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
                found = None
        if found is None or found[0] != kind:
            return None
        return found[1]


class Replays:
    """What the tabs and the API ask before running a model: the recording of this
    request, if there is one for this app's setup, and the runs shared by link."""

    def __init__(self, hub, path: str = "", shared: Optional[SharedRuns] = None):
        self.hub = hub
        self.path = path  # the recordings file; "" for none (every run live)
        self.shared = shared if shared is not None else SharedRuns()
        self._recordings: Optional[Recordings] = None
        self._lock = threading.Lock()

    def recordings(self) -> Optional[Recordings]:
        """Loaded once the default model is (their setup is checked against it);
        None before that."""
        if not self.hub.ready:
            return None
        with self._lock:
            if self._recordings is None:
                self._recordings = Recordings.load(self.path, setup_of(self.hub))
                if len(self._recordings):
                    log.info("%d recorded example runs (recorded on %s)", len(self._recordings),
                             self._recordings.recorded_on)
            return self._recordings

    def recorded(self, kind: str, request):
        """(result, recorded_on) for a request that was recorded, else (None, "")."""
        found = self.recordings()
        result = found.get(kind, request) if found is not None else None
        return (result, found.recorded_on) if result is not None else (None, "")
