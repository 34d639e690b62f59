"""What the parts of the page share.

Concurrency: every event that runs a model shares one queue slot
(``concurrency_id=GENERATE``), so generations never overlap on the CPU (a race
times its two decoders in alternation, app/race.py); requests beyond it wait in the
queue. Replays, toggles and status polls do no model work and are not limited by
that slot. Per-session data (the last race, the walkthrough) lives in ``gr.State``
(:class:`Session`); the only shared objects are the models and the table of stop
flags, keyed by run ids that each session holds privately.
"""
from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass

import gradio as gr

from gumiho import GumihoError

from ..render import esc, render_banner

log = logging.getLogger("gumiho.app")

GENERATE = "generate"  # the queue slot every model-running event shares
CONCURRENCY = max(1, int(os.environ.get("GUMIHO_APP_CONCURRENCY", "1") or 1))


@dataclass
class Session:
    """One visitor's state, private to their page."""

    race: gr.State  # the last race (a RaceResult)
    run_id: gr.State  # the id of their run in flight (app.race.RUNS)
    request: gr.State  # the checked request of the run being started
    walk: gr.State  # the walkthrough (a Walk)


def new_session() -> Session:
    return Session(race=gr.State(None), run_id=gr.State(""), request=gr.State(None), walk=gr.State(None))


def bound(fn, *args):
    """``fn`` with its first arguments given (the hub, for instance), still under its
    own name: Gradio names an event's endpoint after its function, and a bare
    ``functools.partial`` would rename every such endpoint "partial"."""
    call = functools.partial(fn, *args)
    call.__name__, call.__doc__ = fn.__name__, fn.__doc__
    return call


def placeholder(text: str) -> str:
    return f'<span class="gm-placeholder">{text}</span>'


def fail(e: BaseException) -> str:
    """The one way an error reaches the page: a toast, and the banner this returns,
    both with the same text escaped (Gradio renders a toast's message as HTML, so
    text from the request, such as a model id, must not become markup there)."""
    msg = friendly(e)
    gr.Warning(esc(msg))
    return render_banner(msg, "error")


def friendly(e: BaseException) -> str:
    if isinstance(e, GumihoError):
        return str(e)
    log.exception("unexpected error in a request", exc_info=e)
    return f"Something went wrong ({type(e).__name__}); the app keeps serving, please try again."
