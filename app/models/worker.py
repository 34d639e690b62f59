"""The app's queue for model work: one daemon thread that runs submitted jobs in
order, with a bound on how many may wait, and what a waiting visitor is told: their
place in the line and the wait expected from the runs measured so far."""
from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from gumiho import GumihoError

BUSY = ("The server is busy: {n} requests are already waiting for the model, the most it queues. Try again in a "
        "minute.")
# How many finished jobs the expected wait is averaged over: recent enough to follow a
# class's prompts, long enough that one odd run does not swing it.
RECENT_RUNS = 20
# The expected length of a run before any has been measured (a 64-token race on two cores).
FIRST_GUESS_S = 20.0


@dataclass
class Place:
    """Where a submitted job stands: ``ahead`` jobs run before it (the running one
    included), and ``wait_s`` is their expected time, or 0 once it runs."""

    ahead: int
    wait_s: float

    @property
    def running(self) -> bool:
        return self.ahead == 0


class ModelThread:
    """One daemon thread that runs submitted functions in order (a one-worker
    executor that does not hold the process open at exit, mid-load or mid-run).

    At most ``max_waiting`` jobs wait at a time; one more is refused at once with
    a GumihoError (BUSY). This is the app's queue for model work: the web server
    hands every run straight here (app/web/shared.py), so the refusal a visitor
    sees is this one, in the app's words. A job whose future is cancelled before
    it starts is dropped and holds no place.

    A job runs in a copy of its submitter's context variables, as it would in the
    submitter's own thread: a web request's context reaches the model work it asks
    for (on a ZeroGPU Space, the GPU is booked on that request's quota)."""

    def __init__(self, max_waiting: int = 8):
        self._jobs: "deque[tuple[Future, object]]" = deque()
        self._cv = threading.Condition()
        self.max_waiting = max_waiting
        self._running: "tuple[Future, float] | None" = None  # the job on the thread, and when it started
        self._recent: "deque[float]" = deque(maxlen=RECENT_RUNS)  # the last finished jobs' seconds
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="gumiho-model", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait_s: float = 0.0) -> bool:
        """End the thread: jobs still waiting are cancelled, the running one (if any)
        finishes, then the loop returns; a later submit is refused. Idempotent. Waits up
        to ``wait_s`` for the thread to end and says whether it has."""
        with self._cv:
            self._closed = True
            dropped, self._jobs = self._jobs, deque()
            self._cv.notify_all()
        for job in dropped:
            job[0].cancel()
        if threading.current_thread() is not self._thread:  # a job closing its own thread cannot wait for it
            self._thread.join(wait_s)
        return not self._thread.is_alive()

    def waiting(self) -> int:
        with self._cv:
            return sum(1 for f, *_ in self._jobs if not f.cancelled())

    def run_s(self) -> float:
        """The expected length of one job: the mean of the recent ones (the mean, not
        the median, because a waiting visitor waits for the sum of the runs ahead)."""
        with self._cv:
            return sum(self._recent) / len(self._recent) if self._recent else FIRST_GUESS_S

    def place(self, future: Future) -> "Place | None":
        """Where ``future``'s job stands; None once it is done or was never here.
        The wait counts every job ahead at the expected length, less what the
        running one has already taken (never below a tenth of a run: it may overrun)."""
        run_s = self.run_s()
        with self._cv:
            if self._running is not None and self._running[0] is future:
                return Place(0, 0.0)
            live = [f for f, *_ in self._jobs if not f.cancelled()]
            if future not in live:
                return None
            ahead = live.index(future)
            wait = ahead * run_s
            if self._running is not None:
                ahead += 1
                wait += max(run_s - (time.monotonic() - self._running[1]), 0.1 * run_s)
            return Place(ahead, wait)

    def submit(self, fn, measured: bool = True) -> Future:
        """Queue ``fn``; ``measured``: whether its time counts toward the expected
        length of a run (a model's load does not: it is not what visitors wait for)."""
        future: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the model thread is closed")
            live = [job for job in self._jobs if not job[0].cancelled()]
            if len(live) >= self.max_waiting:
                raise GumihoError(BUSY.format(n=len(live)))
            self._jobs = deque(live)
            self._jobs.append((future, functools.partial(contextvars.copy_context().run, fn), measured))
            self._cv.notify()
        return future

    def _loop(self):
        while True:
            # Not kept while the thread waits: a finished job's function may hold a hub and
            # its loaded model, which would otherwise live on until the next job.
            future = fn = None
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                future, fn, measured = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            started = time.monotonic()
            with self._cv:
                self._running = (future, started)
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)
            finally:
                with self._cv:
                    self._running = None
                    if measured:
                        self._recent.append(time.monotonic() - started)


def waiting_text(place) -> str:
    """What a visitor waiting for the model reads: their place and the wait expected
    from the runs measured so far (app.models.worker.ModelThread.place)."""
    if place is None or place.running:
        return "Waiting for the model (one generation runs at a time)…"
    who = "1 run is" if place.ahead == 1 else f"{place.ahead} runs are"
    return (f"In line for the model: {who} ahead of yours (live runs go one at a time, in order of arrival, so "
            f"that their timings stay honest); expected wait about {_duration(place.wait_s)}. Closing the page "
            f"leaves the line.")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
