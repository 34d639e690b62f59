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

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from gumiho import GenerationSettings, StepEvent, Target, stream, summarize
from gumiho.bench.machine_load import LoadMeter

from ..core.forms import Request, check_prompt_length
from ..core.turns import Lane, fewest_tokens, run_in_turns
from ..core.worker import waiting_text
from ..core.zerogpu import on_gpu
from ..models.hub import ModelHub
from ..views.records import FastestRun, RaceResult, record, runtime_words

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
    # Where the run stands in the model thread's line while it waits (app.core.worker.Place),
    # set once the run is queued (app.core.jobs.run_job).
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


@on_gpu  # on a ZeroGPU Space each call runs in a GPU worker (app/core/zerogpu.py); elsewhere unchanged
def compute_race(hub: ModelHub, req: Request, stop: threading.Event, progress: Optional[Progress] = None,
                 scheme: str = "alternating", now: Callable[[], float] = time.perf_counter) -> RaceResult:
    progress = progress or Progress()
    progress.max_tokens = req.settings.max_new_tokens
    progress.phase = "loading"
    res = hub.resolve(req.target, req.drafter, req.drafter_path, req.copy_from_context, req.target_weights)
    target = res.target
    settings = req.settings
    ids = check_prompt_length(target.encode(req.prompt), target.context_length, target.name,
                              hub.settings.max_prompt_tokens)
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


__all__ = ["Progress", "SCHEMES", "TIMING", "timed_race", "compute_race", "fastest_run", "TIMING_NOTE"]
