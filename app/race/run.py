"""The race: vanilla and Gumiho decoding of the same prompt, timed fairly even
when the machine's load changes during the race.

How it stays honest on a shared CPU. The two decoders never compute at the same
instant: both are driven from one thread, one step (one target forward) at a time,
and each keeps its own clock, the sum of the durations of its own steps, so the
time one spends never counts on the other's clock. Their steps alternate, not turn
by turn but by progress: the decoder that has produced fewer tokens so far goes
next (vanilla on a tie). A Gumiho step emits several tokens, so Gumiho takes fewer,
longer turns, and at every moment both are at about the same point of the answer.
Load that comes and goes (another process starting, a neighbour on a shared
Space) therefore lands on both alike, on the same stretch of the answer. Timed
one after the other instead, load present while vanilla ran alone fell on
vanilla only: with a busy process beside it the page once showed an 11x speedup
where the benchmark measures under 2x.

Only when both are done does the page replay the two columns side by side, each
token placed at the time its own decoder's clock showed when it was produced.
Nothing is decoded while the replay is drawn, and nothing is drawn while the race
is timed (progress is read from another thread, between the timed steps).

The earlier scheme, vanilla first and alone, then Gumiho alone, stays available
(``scheme="sequential"``) so that a benchmark can compare the two under load.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterator, Optional

import torch

from gumiho import GenerationSettings, GumihoError, StepEvent, Target, stream, summarize
from gumiho.bench.machine_load import LoadMeter

from ..models.hub import ModelHub
from ..models.worker import waiting_text
from ..models.zerogpu import on_gpu
from ..views.records import FastestRun, RaceResult, record, runtime_words
from ..web.checks.forms import Request, check_prompt_length

TIMING_NOTE = ("**How this race is timed:** vanilla and Gumiho never compute at the same moment. They take "
               "turns on this machine, a step at a time, so that both are always at about the same point of the "
               "answer, and each one's clock counts only its own steps. If the machine gets busier or quieter "
               "during the race, both are slowed or sped up alike. Then both columns are replayed side by side, "
               "each token appearing when its own decoder's clock says it was produced.")

# What the /race API says of how its two wall times were measured, by scheme.
TIMING = {"alternating": "vanilla and Gumiho advanced in alternation, one step at a time, whichever had produced "
                         "fewer tokens going next; each timed on its own clock (the sum of its own steps' "
                         "durations), in the same process",
          "sequential": "each decoder timed alone, one after the other, in the same process"}
SCHEMES = tuple(TIMING)


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
    """How far the race being timed has got. Written on the model thread between
    timed steps and read by the page's thread: plain fields, so that reading them
    costs the race nothing."""

    phase: str = "starting"  # loading, race (both, in alternation), vanilla / gumiho (sequential), fastest, done
    max_tokens: int = 0
    vanilla: int = 0  # tokens produced so far
    gumiho: int = 0

    prompt_tokens: int = 0
    reading: str = ""  # the decoder reading the prompt now (its first step, the prefill); "" once it has
    reading_since: float = 0.0
    # Where the run stands in the model thread's line while it waits (app.models.worker.Place),
    # set once the run is queued (in_background's ``queued``).
    place: Callable[[], object] = lambda: None

    def read(self, label: str) -> None:
        """``label``'s decoder starts reading the prompt ("" when it has read it)."""
        self.reading, self.reading_since = label, time.perf_counter()

    def produced(self, vanilla: int, gumiho: int) -> None:
        """Called after every timed step with both decoders' token counts, outside
        both clocks (a subclass may react to the race's progress here)."""
        self.vanilla, self.gumiho = vanilla, gumiho

    def text(self) -> str:
        if self.reading and self.phase in ("race", "vanilla", "gumiho"):
            # A long prompt takes most of a minute to read on a busy CPU: say so, with the clock.
            who = "vanilla decoding" if self.reading == "vanilla" else "Gumiho"
            return (f"Reading the prompt for {who}: {self.prompt_tokens:,} tokens… "
                    f"{time.perf_counter() - self.reading_since:.0f} s")
        if self.phase == "race":
            return (f"Timing vanilla and Gumiho in alternation… vanilla {self.vanilla}/{self.max_tokens}, "
                    f"Gumiho {self.gumiho}/{self.max_tokens} tokens")
        if self.phase == "vanilla":
            return f"Timing vanilla decoding alone… {self.vanilla}/{self.max_tokens} tokens"
        if self.phase == "gumiho":
            return f"Timing Gumiho decoding alone… {self.gumiho}/{self.max_tokens} tokens"
        if self.phase == "fastest":
            return "Timing vanilla on the model's 4-bit file, the fastest way to run it here…"
        if self.phase == "loading":
            return "Loading the model for this request…"
        return waiting_text(self.place())


class Lane:
    """One decoder's step stream, advanced one step at a time on its own clock."""

    def __init__(self, label: str, steps: Iterator[StepEvent]):
        self.label = label
        self.steps = steps
        self.events: list[StepEvent] = []
        self.tokens = 0
        self.clock = 0.0  # seconds: the sum of this decoder's own step durations
        self.done = False

    @property
    def started(self) -> bool:
        return bool(self.events) or self.done

    def advance(self, now: Callable[[], float]) -> None:
        t = now()
        try:
            ev = next(self.steps)
        except StopIteration:
            self.done = True
            return
        took = now() - t
        if not self.events:
            # The engine starts its own clock after one-time setup that is not this
            # generation's work (measuring a target's verify cost on its first
            # cost-aware run), and before a stream's first step nothing else has
            # run, so its figure for that step is the one to keep.
            took = min(took, ev.elapsed_s)
        self.clock += took
        # The engine's elapsed_s is wall time since the stream started, which here
        # would include the other decoder's steps: the event carries this clock instead.
        self.events.append(dataclasses.replace(ev, elapsed_s=self.clock))
        self.tokens += len(ev.emitted)
        self.done = ev.finished

    def close(self) -> None:
        close = getattr(self.steps, "close", None)
        if close is not None:
            close()


def timed_race(target, ids, drafter, settings, stop: threading.Event, progress: Progress,
               scheme: str = "alternating", now: Callable[[], float] = time.perf_counter
               ) -> tuple[list[StepEvent], list[StepEvent]]:
    """Run vanilla and ``drafter``'s decoding of ``ids`` to the end, timed by
    ``scheme`` (see the module's docstring): "alternating" advances whichever has
    produced fewer tokens, "sequential" runs vanilla to its end, then Gumiho. The
    streams are consumed as fast as they produce: no rendering, no yielding to the
    web server between steps. Returns both decoders' events, each on its own clock.

    ``stop`` ends both at their next step; a decoder not started by then is not
    started at all."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown timing scheme {scheme!r}; one of {', '.join(SCHEMES)}")
    vanilla = Lane("vanilla", stream(target, ids, None, settings, stop=stop))
    gumiho = Lane("gumiho", stream(target, ids, drafter, settings, stop=stop))
    progress.phase = "race" if scheme == "alternating" else "vanilla"

    def sequential(live: list[Lane]) -> Lane:
        progress.phase = live[0].label
        return live[0]

    run_in_turns([vanilla, gumiho], stop, fewest_tokens if scheme == "alternating" else sequential,
                 progress.read, lambda: progress.produced(vanilla.tokens, gumiho.tokens), now)
    return vanilla.events, gumiho.events


def fewest_tokens(live: list[Lane]) -> Lane:
    """The race's turn rule: the lane that has produced fewest tokens goes next (the
    first of them on a tie: vanilla, given first)."""
    return min(live, key=lambda lane: lane.tokens)


def run_in_turns(lanes: list[Lane], stop: threading.Event, pick: Callable[[list[Lane]], Lane],
                 reading: Callable[[str], None], stepped: Callable[[], None],
                 now: Callable[[], float] = time.perf_counter) -> None:
    """Advance ``lanes`` one step at a time, ``pick`` choosing among those not done,
    until every one is done. ``reading(label)`` is told when a lane starts reading
    the prompt (its first step) and ``reading("")`` when it has; ``stepped()`` is
    called after every step, outside every clock. A lane not started when ``stop``
    is set is not started at all."""
    # Each stream runs its steps inside its own inference-mode block, which restores
    # on exit the state it found on entry. Interleaved streams leave their blocks out
    # of order, and the thread would be left in whatever state the last one had
    # found; inside this block every one of them finds (and restores) the same state.
    with torch.inference_mode():
        try:
            while True:
                live = [lane for lane in lanes if not lane.done]
                if not live:
                    break
                lane = pick(live)
                if not lane.started and stop.is_set():
                    lane.done = True
                    continue
                first = not lane.started
                if first:
                    reading(lane.label)
                lane.advance(now)
                if first:
                    reading("")
                stepped()
        finally:
            # The later-started streams first, so that the blocks are left in order
            # whenever that is possible.
            for lane in reversed(lanes):
                lane.close()


@on_gpu  # on a ZeroGPU Space each call runs in a GPU worker (app/models/zerogpu.py); elsewhere unchanged
def compute_race(hub: ModelHub, req: Request, stop: threading.Event, progress: Optional[Progress] = None,
                 scheme: str = "alternating", now: Callable[[], float] = time.perf_counter) -> RaceResult:
    progress = progress or Progress()
    progress.max_tokens = req.settings.max_new_tokens
    progress.phase = "loading"
    res = hub.resolve(req.target, req.drafter, req.drafter_path, req.copy_from_context, req.target_weights)
    target = res.target
    settings = req.settings
    ids = check_prompt_length(target.encode(req.prompt), target.context_length, target.name)
    progress.prompt_tokens = len(ids)
    meter = LoadMeter()
    try:
        v_events, g_events = timed_race(target, ids, res.drafter, settings, stop, progress, scheme, now)
        machine = meter.reading()  # the timed race only: the fastest run below is timed alone
        fastest = None
        if res.fastest is not None and not stop.is_set():
            progress.phase = "fastest"
            fastest = fastest_run(res.fastest, ids, settings, stop, v_events)
    finally:
        progress.phase = "done"
    tok = target.tokenizer
    vanilla = record("vanilla", v_events, tok, ids)
    gumiho = record("gumiho", g_events, tok, ids, res.drafter, settings.tree_on(target).depth)
    if stop.is_set():
        vanilla.stopped = gumiho.stopped = True
    return RaceResult(prompt_tokens=len(ids), vanilla=vanilla, gumiho=gumiho, model=target.name,
                      drafter_note=res.note, temperature=req.settings.temperature,
                      notes=[res.drafter_label], scheme=scheme, runtime=target.runtime.name,
                      weights=target.runtime.weights, flat_verify=target.runtime.flat_verify, fastest=fastest,
                      runtime_note=runtime_words(target, res.fastest), machine=machine)


def fastest_run(target: Target, ids: list[int], settings: GenerationSettings, stop: threading.Event,
                race_vanilla: list[StepEvent]) -> Optional[FastestRun]:
    """Vanilla decoding of the race's prompt on ``target`` (the model as loaded: its
    4-bit file in llama.cpp), timed alone after the race, so that the page can say how
    the race's two lanes compare with the fastest way to run the model here. Its text is
    that runtime's own: other weights may choose other tokens."""
    events = list(stream(target, ids, None, dataclasses.replace(settings, tree=None), stop=stop))
    if not events or events[-1].finish_reason == "stopped":
        return None
    tokens = [t for e in events for t in e.tokens]
    return FastestRun(runtime=target.runtime.name, weights=target.runtime.weights, stats=summarize(events),
                      text_same=tokens == [t for e in race_vanilla for t in e.tokens])


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
    job's work (app.models.worker.work_of), scales the waits the line expects."""
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


def tell_place(progress, hub: ModelHub) -> Callable[[object], None]:
    """In_background's ``queued``: once the run is in the model thread's line,
    ``progress.place()`` reads where it stands there."""
    def queued(future) -> None:
        progress.place = lambda: hub.place(future)
    return queued


async def on_model_thread(fn, submit, stop: Optional[threading.Event] = None,
                          queued: Optional[Callable[[object], None]] = None, size: Optional[float] = None):
    """``fn()`` run on the model thread, awaited; cancelled as :func:`in_background` is."""
    result = None
    async for item in in_background(fn, submit, stop, poll_s=3600, queued=queued, size=size):
        result = item
    return result


async def until_ready(hub: ModelHub, timeout_s: float = 600.0, poll_s: float = 0.25) -> None:
    """Wait for the default model without holding a thread (many requests may wait
    at once while it loads, and a cancelled one must leave nothing behind)."""
    deadline = time.monotonic() + timeout_s
    while not hub.wait_ready(0) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)


__all__ = ["RUNS", "Runs", "Control", "Progress", "Lane", "SCHEMES", "TIMING", "timed_race", "run_in_turns",
           "fewest_tokens", "compute_race",
           "in_background", "tell_place", "on_model_thread", "until_ready", "TIMING_NOTE", "GumihoError"]
