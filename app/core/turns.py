"""Decoders timed in turns on one thread, each on its own clock: the race's two lanes
(app/race/run.py says why it is fair on a shared CPU) and the comparison's many
(app/compare/run.py). A lane is one decoder's step stream; :func:`run_in_turns`
advances the lanes one step at a time, a rule picking which goes next."""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Iterator

import torch

from gumiho import StepEvent


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


__all__ = ["Lane", "fewest_tokens", "run_in_turns"]
