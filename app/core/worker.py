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
# The expected seconds per unit of work (a token of a lane) before any run has been measured:
# a 64-token race (128 lane tokens) in 20 s on two cores.
FIRST_GUESS_S = 20.0 / 128


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
    hands every run straight here (app/core/page.py), so the refusal a visitor
    sees is this one, in the app's words. A job whose future is cancelled before
    it starts is dropped and holds no place.

    A job runs in a copy of its submitter's context variables, as it would in the
    submitter's own thread: a web request's context reaches the model work it asks
    for (on a ZeroGPU Space, the GPU is booked on that request's quota)."""

    def __init__(self, max_waiting: int = 8):
        self._jobs: "deque[tuple[Future, object]]" = deque()
        self._cv = threading.Condition()
        self.max_waiting = max_waiting
        # The job on the thread, when it started and its size (its units of work).
        self._running: "tuple[Future, float, float] | None" = None
        self._recent: "deque[tuple[float, float]]" = deque(maxlen=RECENT_RUNS)  # the last jobs' (seconds, size)
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

    def run_s(self, size: float = 1.0) -> float:
        """The expected seconds of a job of ``size`` units: the recent jobs' seconds over
        their units, a ratio of sums (a mean, not a median: a waiting visitor waits for
        the sum of the runs ahead), so that a short warm-up and a long race each count
        for the work they did."""
        with self._cv:
            seconds, units = sum(s for s, _ in self._recent), sum(u for _, u in self._recent)
        return size * (seconds / units if units > 0 else FIRST_GUESS_S)

    def place(self, future: Future) -> "Place | None":
        """Where ``future``'s job stands; None once it is done or was never here.
        The wait counts every job ahead at the expected length, less what the
        running one has already taken (never below a tenth of a run: it may overrun)."""
        rate = self.run_s()
        with self._cv:
            if self._running is not None and self._running[0] is future:
                return Place(0, 0.0)
            live = [(f, size) for f, _, _, size in self._jobs if not f.cancelled()]
            index = next((i for i, (f, _) in enumerate(live) if f is future), None)
            if index is None:
                return None
            ahead = index
            wait = rate * sum(size for _, size in live[:index])
            if self._running is not None:
                ahead += 1
                expected = rate * self._running[2]
                wait += max(expected - (time.monotonic() - self._running[1]), 0.1 * expected)
            return Place(ahead, wait)

    def submit(self, fn, measured: bool = True, size: float = 128.0) -> Future:
        """Queue ``fn``; ``measured``: whether its time counts toward the expected
        length of a run (a model's load does not: it is not what visitors wait for);
        ``size``: its work in units the app's runs share (the tokens all its lanes
        write), which the expected wait scales with (default: a 64-token race's)."""
        future: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the model thread is closed")
            live = [job for job in self._jobs if not job[0].cancelled()]
            if len(live) >= self.max_waiting:
                raise GumihoError(BUSY.format(n=len(live)))
            self._jobs = deque(live)
            self._jobs.append((future, functools.partial(contextvars.copy_context().run, fn), measured,
                               max(float(size), 1e-6)))
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
                future, fn, measured, size = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            started = time.monotonic()
            with self._cv:
                self._running = (future, started, size)
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)
            finally:
                with self._cv:
                    self._running = None
                    if measured:
                        self._recent.append((time.monotonic() - started, size))


def work_of(kind: str, req) -> float:
    """A checked request's size for the line's expected waits: the tokens all its lanes
    write (a race two lanes, a comparison one per decoder, the losslessness check two
    samples of its first tokens per draw, a walkthrough one lane)."""
    if kind == "lossless":
        return 2.0 * req.samples * req.tokens
    lanes = {"race": 2, "walkthrough": 1}.get(kind) or 1 + len(getattr(req, "methods", ()))
    return float(lanes * req.settings.max_new_tokens)


def waiting_text(place) -> str:
    """What a visitor waiting for the model reads: their place and the wait expected
    from the runs measured so far (app.core.worker.ModelThread.place)."""
    if place is None or place.running:
        return "Waiting for the model (one generation runs at a time)…"
    who = "1 run is" if place.ahead == 1 else f"{place.ahead} runs are"
    return (f"In line for the model: {who} ahead of yours (live runs go one at a time, in order of arrival, so "
            f"that their timings stay honest); expected wait about {_duration(place.wait_s)}. Closing the page "
            f"leaves the line.")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
