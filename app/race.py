"""The race: vanilla and Gumiho decoding of the same prompt, each timed alone.

How it stays honest on a shared CPU: the two runs never overlap. Vanilla runs
first, alone, then Gumiho, alone, each recording the time at which every target
forward finished. Only then does the page replay both columns side by side,
placing every token at the moment it was really produced. Nothing is decoded
while the replay is drawn, and nothing is drawn while a run is being timed
(progress is read from another thread, outside the timed loop).
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import AsyncIterator, Iterator, Optional

from gumiho import GumihoError, StepEvent, stream

from .hub import ModelHub
from .inputs import Request, check_prompt_ids
from .render import speedup
from .tokens import RaceResult, record

TIMING_NOTE = ("**How this race is timed:** vanilla and Gumiho do not run at the same time. Each one runs alone on "
               "this machine while every token's time is recorded; then both columns are replayed side by side with "
               "those real timestamps. So the speeds you see are each decoder's own, never one slowing the other.")


# ----------------------------------------------------------------------------- per-run controls


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


# ----------------------------------------------------------------------------- timing


@dataclass
class Progress:
    phase: str = "starting"  # starting, vanilla, gumiho, done
    tokens: int = 0
    max_tokens: int = 0

    def text(self) -> str:
        if self.phase == "vanilla":
            return f"Timing vanilla decoding alone… {self.tokens}/{self.max_tokens} tokens"
        if self.phase == "gumiho":
            return f"Timing Gumiho decoding alone… {self.tokens}/{self.max_tokens} tokens"
        if self.phase == "loading":
            return "Loading the model for this request…"
        return "Preparing…"


def timed_run(target, ids, drafter, settings, stop, progress: Progress) -> list[StepEvent]:
    """Consume the engine's stream as fast as it produces: no rendering, no
    yielding to the web server inside the timed loop."""
    events: list[StepEvent] = []
    progress.tokens = 0
    for ev in stream(target, ids, drafter, settings, stop=stop):
        events.append(ev)
        progress.tokens += len(ev.emitted)
    return events


def compute_race(hub: ModelHub, req: Request, stop: threading.Event, progress: Optional[Progress] = None) -> RaceResult:
    progress = progress or Progress()
    progress.max_tokens = req.settings.max_new_tokens
    progress.phase = "loading"
    res = hub.resolve(req.target_id, req.drafter_kind, req.drafter_path)
    target = res.target
    ids = check_prompt_ids(target.encode(req.prompt), target.context_length, target.name)
    progress.phase = "vanilla"
    v_events = timed_run(target, ids, None, req.settings, stop, progress)
    g_events: list[StepEvent] = []
    if not stop.is_set():
        progress.phase = "gumiho"
        g_events = timed_run(target, ids, res.drafter, req.settings, stop, progress)
    progress.phase = "done"
    tok = target.tokenizer
    vanilla = record("vanilla", v_events, tok, ids)
    gumiho = record("gumiho", g_events, tok, ids, res.drafter)
    if stop.is_set():
        vanilla.stopped = gumiho.stopped = True
    return RaceResult(prompt_tokens=len(ids), vanilla=vanilla, gumiho=gumiho, model=target.name,
                      drafter_note=res.note, temperature=req.settings.temperature,
                      notes=[res.drafter_label])


async def in_background(fn, submit, stop: Optional[threading.Event] = None,
                        poll_s: float = 0.5) -> AsyncIterator[Optional[object]]:
    """Run ``fn()`` through ``submit`` (the model thread: ``ModelHub.submit``);
    yield None every ``poll_s`` while it runs (so the caller can show progress),
    then its result as the last item. Its exception, if any, is raised here.

    Async, so that the web server's cancellation reaches it: a request cancelled
    by its client (or whose page went away) is an asyncio cancellation here, or a
    close of this generator. Either way the job is taken off the model thread's
    queue if it has not started, and ``stop`` is set so that a running one ends
    at its next step, which frees the model for the next request."""
    future = submit(fn)
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


async def on_model_thread(fn, submit, stop: Optional[threading.Event] = None):
    """``fn()`` run on the model thread, awaited; cancelled as :func:`in_background` is."""
    result = None
    async for item in in_background(fn, submit, stop, poll_s=3600):
        result = item
    return result


async def until_ready(hub: ModelHub, timeout_s: float = 600.0, poll_s: float = 0.25) -> None:
    """Wait for the default model without holding a thread (many requests may wait
    at once while it loads, and a cancelled one must leave nothing behind)."""
    deadline = time.monotonic() + timeout_s
    while not hub.wait_ready(0) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)


# ----------------------------------------------------------------------------- replay


@dataclass
class Frame:
    clock: float
    n_vanilla: int
    n_gumiho: int
    final: bool
    plots: bool  # time to redraw the figures
    stopped: bool = False


def replay_frames(result: RaceResult, stop: threading.Event, fps: float = 12.0, plot_period: float = 0.5,
                  sleep=time.sleep, now=time.perf_counter) -> Iterator[Frame]:
    """Frames of the side-by-side replay: at wall time t after its start, each
    column shows the steps its own timed run had finished by t. ``stop`` set during
    the replay ends it where it is.

    A race stopped while it was being timed (or whose Stop came just as its timing
    ended: ``stop`` is already set) is not replayed: one final frame shows all that
    was produced until then, since the Stop was meant for the decoding, not for
    hiding its result."""
    duration = result.duration
    if stop.is_set() or result.vanilla.stopped or result.gumiho.stopped:
        yield Frame(duration, len(result.vanilla.events), len(result.gumiho.events), final=True, plots=True)
        return
    times = sorted({ev.elapsed_s for run in (result.vanilla, result.gumiho) for ev in run.events})
    start = now()
    last_plot, plotted = -1e9, None
    while True:
        t = now() - start
        stopped = stop.is_set()
        final = stopped or t >= duration
        clock = min(t, duration)
        counts = (result.vanilla.steps_until(clock), result.gumiho.steps_until(clock))
        # Figures are redrawn at most every plot_period, and only when something changed.
        plots = final or ((t - last_plot) >= plot_period and counts != plotted)
        if plots:
            last_plot, plotted = t, counts
        yield Frame(clock, counts[0], counts[1], final, plots, stopped and t < duration)
        if final:
            return
        nxt = next((x for x in times if x > t), duration)
        sleep(max(0.0, min(1.0 / fps, nxt - t)) or 0.001)


# ----------------------------------------------------------------------------- API summary


def summary(result: RaceResult, prompt: str) -> dict:
    """What the /race API endpoint returns."""

    def run(r):
        st = r.stats()
        return {"text": r.text, "tokens": [t for ev in r.events for t in ev.tokens], "new_tokens": st.new_tokens,
                "target_forwards": st.target_forwards, "tau": round(st.tau, 4), "wall_s": round(r.wall_s, 4),
                "tokens_per_s": round(st.tokens_per_s, 3), "finish_reason": r.finish_reason}

    sp = speedup(result)
    return {"ok": True, "message": "", "prompt": prompt, "prompt_tokens": result.prompt_tokens, "model": result.model,
            "drafter": result.notes[0] if result.notes else "", "drafter_note": result.drafter_note,
            "vanilla": run(result.vanilla), "gumiho": run(result.gumiho),
            "speedup": round(sp[0], 4) if sp else None, "speedup_kind": sp[1] if sp else None,
            "timing": "each decoder timed alone, one after the other, in the same process"}


def error_summary(message: str, prompt) -> dict:
    # The prompt is echoed only when it is valid text: a lone surrogate cannot be sent back as JSON.
    echo = prompt if isinstance(prompt, str) and prompt.encode("utf-8", "replace").decode("utf-8") == prompt else None
    return {"ok": False, "message": message, "prompt": echo}


__all__ = ["RUNS", "Runs", "Control", "Progress", "compute_race", "in_background", "on_model_thread", "until_ready",
           "replay_frames", "summary", "error_summary", "TIMING_NOTE", "GumihoError"]
