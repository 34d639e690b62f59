"""Model jobs, as every tab and API endpoint runs them: :func:`run_job` answers a
checked request from its recording, or runs its computation on the model thread
(the hub's one thread, app/core/worker.py), reporting progress while it waits and
runs. Also the per-run controls (:data:`RUNS`: stop flags and live toggles by run id).

Nothing here knows a feature: a job is a request, the kind under which its
recordings and its size are kept (app.core.worker.work_of), and a computation
``compute(stop)``; the hub and the replays come as arguments (anything with their
methods), so that the features depend on this module and never the other way."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Optional

from .worker import work_of


@dataclass
class Control:
    stop: threading.Event = field(default_factory=threading.Event)
    show_rejected: bool = False
    active: bool = True


class Runs:
    """Stop flags and live toggles of the runs in flight, by run id. The id lives
    in the session's own state, so one session can only ever stop its own run."""

    def __init__(self, limit: int = 1024):
        self._runs: "OrderedDict[str, Control]" = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def new(self, show_rejected: bool = False) -> str:
        run_id = uuid.uuid4().hex
        with self._lock:
            self._runs[run_id] = Control(show_rejected=bool(show_rejected))
            while len(self._runs) > self._limit:  # sessions that vanished mid-run
                self._runs.popitem(last=False)
        return run_id

    def get(self, run_id: Optional[str]) -> Optional[Control]:
        with self._lock:
            return self._runs.get(run_id) if run_id else None

    def stop(self, run_id: Optional[str]) -> bool:
        ctl = self.get(run_id)
        if ctl is None:
            return False
        ctl.stop.set()
        return True

    def end(self, run_id: Optional[str]) -> None:
        with self._lock:
            if run_id:
                self._runs.pop(run_id, None)

    def __len__(self):
        return len(self._runs)


RUNS = Runs()


# ----------------------------------------------------------------------------- the model thread, awaited


async def in_background(fn, submit, stop: Optional[threading.Event] = None, poll_s: float = 0.5,
                        queued: Optional[Callable[[object], None]] = None,
                        size: Optional[float] = None) -> AsyncIterator[Optional[object]]:
    """Run ``fn()`` through ``submit`` (the model thread: ``ModelHub.submit``);
    yield None every ``poll_s`` while it runs (so the caller can show progress),
    then its result as the last item. Its exception, if any, is raised here.

    Async, so that the web server's cancellation reaches it: a request cancelled
    by its client (or whose page went away) is an asyncio cancellation here, or a
    close of this generator. Either way the job is taken off the model thread's
    queue if it has not started, and ``stop`` is set so that a running one ends
    at its next step, which frees the model for the next request. ``queued(future)``
    is told the job's future as soon as it is in the model thread's line; ``size``, the
    job's work (app.core.worker.work_of), scales the waits the line expects."""
    future = submit(fn) if size is None else submit(fn, size=size)
    if queued is not None:
        queued(future)
    waiting = asyncio.wrap_future(future)
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=poll_s)
            if done:
                break
            yield None
    finally:
        if not future.done():
            future.cancel()
            if stop is not None:
                stop.set()
    yield waiting.result()


# ----------------------------------------------------------------------------- running a job


async def until_ready(hub, timeout_s: float = 600.0, poll_s: float = 0.25) -> None:
    """Wait for the default model without holding a thread (many requests may wait
    at once while it loads, and a cancelled one must leave nothing behind)."""
    deadline = time.monotonic() + timeout_s
    while not hub.wait_ready(0) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)


# What run_job reports, in order: at most one LOADING (the default model is still
# loading), then RUNNING every poll while the job waits in line or runs, then DONE;
# or RECORDED alone, for a request answered from its recording.
RECORDED, LOADING, RUNNING, DONE = "recorded", "loading", "running", "done"


@dataclass
class JobUpdate:
    stage: str  # RECORDED, LOADING, RUNNING or DONE
    result: object = None  # RECORDED and DONE: the job's result
    recorded_on: str = ""  # RECORDED: the recording's machine and day
    # DONE: where the job stood when it joined the model thread's line (the runs ahead of
    # it, the wait then expected) and the seconds from then to its answer.
    line: dict = field(default_factory=dict)


async def run_job(hub, replays, kind: str, req, compute: Callable[[threading.Event], object], *,
                  live: bool = False, stop: Optional[threading.Event] = None, progress=None,
                  default_target: bool = True, poll_s: float = 0.5) -> AsyncIterator[JobUpdate]:
    """Answer the checked request ``req`` of ``kind`` ("race", "walkthrough", "compare",
    "lossless"): from its recording (``replays.recorded``) unless ``live``, else by
    ``compute(stop)`` on the hub's model thread, first waiting for the default model
    when the job uses it (``default_target``). Yields :class:`JobUpdate`s; the job's
    exception, if any, is raised here, for the caller to turn into words.

    Async, so that the web server's cancellation reaches the job: a request cancelled
    by its client (or whose page went away) leaves the line if it has not started, and
    ``stop`` is set so that a running one ends at its next step. ``progress``, where
    given, gets ``place()``: where the job stands in the line (app.core.worker.Place)."""
    if default_target and not hub.wait_ready(0):
        yield JobUpdate(LOADING)
        await until_ready(hub)
    # Looked up once the model is loaded: the recordings are checked against its setup.
    recorded, recorded_on = (None, "") if live else replays.recorded(kind, req)
    if recorded is not None:
        yield JobUpdate(RECORDED, recorded, recorded_on)
        return
    stop = stop if stop is not None else threading.Event()
    line: dict = {}

    def queued(future) -> None:
        place = hub.place(future)
        line.update(ahead_at_arrival=place.ahead if place else 0,
                    expected_wait_s=round(place.wait_s, 2) if place else 0.0, since=time.monotonic())
        if progress is not None:
            progress.place = lambda: hub.place(future)

    result = None
    async for item in in_background(lambda: compute(stop), hub.submit, stop, poll_s, queued, work_of(kind, req)):
        if item is None:
            yield JobUpdate(RUNNING)
        else:
            result = item
    waited = round(time.monotonic() - line.pop("since"), 2) if "since" in line else None
    yield JobUpdate(DONE, result, line={**line, "answered_after_s": waited})


__all__ = ["RUNS", "Runs", "Control", "in_background", "until_ready", "run_job", "JobUpdate", "RECORDED", "LOADING",
           "RUNNING", "DONE"]
