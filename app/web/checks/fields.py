"""What each of the page's events may carry, checked before Gradio reads it.

Gradio's own checks of a control's value (a slider's range, a radio's choices)
fail with a traceback in the server's log and an empty error for the client, and
a null reaches them as a Python TypeError. The page only ever sends values its
controls can hold, so anything else is refused here, in words, by app.web.checks.requests:
a value of the wrong kind or out of its control's range, and an event of a
chain (``.then``) sent without the event that starts it.

A control's limits are read from the visitor's own session where an event has
changed them (the walkthrough's step slider grows with each walk, the drafter
menu with the drafters shipped), else from the page as built.
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class Event:
    """One of the page's events, as the guard sees it."""

    inputs: tuple  # the input components, in order
    api: Optional[str]  # a documented endpoint's name (its values are completed, not checked here), else None
    after: Optional[int]  # the event whose ``.then`` this is (sent by the page only after it)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _choices(block) -> list:
    return [c[1] if isinstance(c, (list, tuple)) else c for c in (getattr(block, "choices", None) or [])]


def _in_range(v, block) -> bool:
    lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
    return (lo is None or v >= lo) and (hi is None or v <= hi)


def _range_words(block) -> str:
    lo, hi = getattr(block, "minimum", None), getattr(block, "maximum", None)
    if lo is not None and hi is not None:
        return f"a number from {lo:g} to {hi:g}"
    return "a number"


def problem(block, value) -> Optional[str]:
    """What is wrong with ``value`` for the control ``block`` (None: nothing)."""
    kind = type(block).__name__
    if kind == "State":  # the server keeps it: whatever is sent is not read
        return None
    if kind == "Checkbox":
        return None if isinstance(value, bool) else "true or false"
    if kind == "Textbox":  # null: a box the page left empty (the app's checks name what is missing)
        return None if value is None or isinstance(value, str) else "text"
    if kind == "FigureSlider":  # What if?'s figures: any finite number, the handler says when beyond the track
        return None if is_number(value) else "a number"
    if kind in ("Slider", "Number"):
        if value is None and kind == "Number":  # an emptied number box; the app's checks name it
            return None
        return None if is_number(value) and _in_range(value, block) else _range_words(block)
    if kind in ("Radio", "Dropdown"):
        ok = isinstance(value, (str, int, float)) and not isinstance(value, bool) and value in _choices(block)
        return None if ok else "one of its choices"
    if kind == "Dataset":
        return None if isinstance(value, int) and not isinstance(value, bool) else "an example's index"
    return "nothing a page sends"  # a control with no rule here: refused rather than guessed


def refusal(inputs: Sequence, data, session_blocks: Optional[dict]) -> Optional[str]:
    """The refusal's words for the values ``data`` of an event with ``inputs`` (None: they are the page's kind)."""
    if not isinstance(data, list) or len(data) != len(inputs):
        return f"This event is the page's own; it takes the {len(inputs)} values the page sends."
    for i, (block, value) in enumerate(zip(inputs, data)):
        here = (session_blocks or {}).get(block._id, block)
        wanted = problem(here, value)
        if wanted is not None:
            label = getattr(here, "label", None) or type(here).__name__.lower()
            return f"This event is the page's own: its value {i + 1} ({str(label)[:40]}) must be {wanted}."
    return None


class Chains:
    """Which chained events each session may send next: an event sent with its
    ``after`` event before it. A session sends a chain's first event once per
    click, so a few tickets each are plenty; sessions beyond ``limit`` (a client
    inventing session ids) are forgotten oldest first."""

    PER_EVENT = 4

    def __init__(self, limit: int = 10_000):
        self._tickets: "OrderedDict[str, dict[int, int]]" = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def sent(self, session: str, fn: int, events: dict) -> None:
        """``fn`` was sent by ``session``: the events chained after it may follow."""
        followers = [i for i, e in events.items() if e.after == fn]
        if not followers:
            return
        with self._lock:
            tickets = self._tickets.setdefault(session, {})
            self._tickets.move_to_end(session)
            for i in followers:
                tickets[i] = min(tickets.get(i, 0) + 1, self.PER_EVENT)
            while len(self._tickets) > self._limit:
                self._tickets.popitem(last=False)

    def take(self, session: str, fn: int) -> bool:
        """Whether ``session`` may send the chained event ``fn`` now (and uses that turn)."""
        with self._lock:
            tickets = self._tickets.get(session, {})
            if tickets.get(fn, 0) <= 0:
                return False
            tickets[fn] -= 1
            return True
