"""The app's queue for model work: one daemon thread that runs submitted jobs in
order, with a bound on how many may wait."""
from __future__ import annotations

import contextvars
import functools
import threading
from collections import deque
from concurrent.futures import Future

from gumiho import GumihoError

BUSY = ("The server is busy: {n} requests are already waiting for the model, the most it queues. Try again in a "
        "minute.")


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
            return sum(1 for f, _ in self._jobs if not f.cancelled())

    def submit(self, fn) -> Future:
        future: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the model thread is closed")
            live = [job for job in self._jobs if not job[0].cancelled()]
            if len(live) >= self.max_waiting:
                raise GumihoError(BUSY.format(n=len(live)))
            self._jobs = deque(live)
            self._jobs.append((future, functools.partial(contextvars.copy_context().run, fn)))
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
                future, fn = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)
