"""What the parts of the page share.

Concurrency: every piece of model work runs on the hub's one model thread
(app/models/hub.py, its queue app/core/worker.py), so generations never overlap on the CPU (a race times its two
decoders in alternation, app/race/run.py). That thread is the queue: at most
``GUMIHO_APP_MAX_WAITING`` runs wait for it, and one more is refused at once with
"The server is busy" (the page's banner, the API's ``ok: false``). The events
that run a model (``concurrency_id=GENERATE``) therefore have no limit of
Gradio's: a limit there would hold the runs in Gradio's own queue, where they
would wait silently and be refused only by its size, with its own words.
Replays, toggles and status polls do no model work. Per-session data (the last race, the walkthrough) lives in ``gr.State``
(:class:`Session`); the only shared objects are the models and the table of stop
flags, keyed by run ids that each session holds privately.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import re
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Optional

import gradio as gr

from gumiho import GumihoError

from ..views.render import esc, render_banner
from .jobs import DONE, LOADING, RECORDED, JobUpdate

log = logging.getLogger("gumiho.app")

GENERATE = "generate"  # the queue slot every model-running event shares
# Gradio's queue, which holds the events that do no model work, is sized by the server's
# settings (app.core.settings.AppSettings.queue_limit).


@dataclass
class Session:
    """One visitor's state, private to their page."""

    race: gr.State  # the last race (a RaceResult)
    run_id: gr.State  # the id of their run in flight (app.core.jobs.RUNS)
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


def by_name(fn: Callable, inputs: dict, outputs: dict, *args) -> Callable:
    """``fn(*args, values)`` as a Gradio handler wired by name: ``inputs`` and
    ``outputs`` map names to components; ``fn`` gets the inputs' values as one dict
    by name (``values["prompt"]``) and returns (or yields) a dict by name of the
    outputs it changes, the others left as they are. Nothing is counted or placed:
    wire the event with ``inputs=set(inputs.values())`` and
    ``outputs=list(outputs.values())``. Under ``fn``'s own name, which Gradio gives
    the event's endpoint."""
    components = list(outputs.values())

    def gradio_values(named: dict):
        unknown = set(named) - set(outputs)
        if unknown:  # a mistake of the wiring's, found at its first call
            raise KeyError(f"{fn.__name__} returned {sorted(unknown)}, which its event does not output")
        if not named:
            return gr.skip()
        if len(components) == 1:  # Gradio takes a single output's value bare
            return next(iter(named.values()))
        return {outputs[name]: value for name, value in named.items()}

    def by_names(values: dict) -> dict:
        return {name: values[component] for name, component in inputs.items()}

    if inspect.isasyncgenfunction(fn):
        async def call(values):
            async for named in fn(*args, by_names(values)):
                yield gradio_values(named)
    elif inspect.isgeneratorfunction(fn):
        def call(values):
            for named in fn(*args, by_names(values)):
                yield gradio_values(named)
    elif inspect.iscoroutinefunction(fn):
        async def call(values):
            return gradio_values(await fn(*args, by_names(values)))
    else:
        def call(values):
            return gradio_values(fn(*args, by_names(values)))
    call.__name__, call.__doc__ = fn.__name__, fn.__doc__
    return call


def wire(trigger, fn: Callable, inputs: dict, outputs: dict, *args, **event):
    """``trigger(...)`` (a ``click``, ``change`` or ``then``) running ``fn`` wired by
    name (:func:`by_name`); ``event``: the event's other settings. Returns the event."""
    return trigger(by_name(fn, inputs, outputs, *args), inputs=set(inputs.values()), outputs=list(outputs.values()),
                   **event)


async def job_outputs(updates: AsyncIterator[JobUpdate], show: Callable[[object], dict],
                      show_recorded: Callable[[object, str], dict], progress_text: Callable[[], str],
                      waiting: Optional[dict] = None) -> AsyncIterator[dict]:
    """A tab's outputs for a job's updates (app.core.jobs.run_job), each a dict by name:
    ``show(result)`` when it is done, ``show_recorded(result, recorded_on)`` for a
    recording, and while it waits the status banner (with ``progress_text()`` once it
    is in line), with ``waiting``'s outputs beside it."""
    waiting = waiting or {}
    async for update in updates:
        if update.stage == RECORDED:
            yield show_recorded(update.result, update.recorded_on)
        elif update.stage == DONE:
            yield show(update.result)
        elif update.stage == LOADING:
            yield {**waiting, "status": render_banner("Waiting for the model to finish loading…", "loading")}
        else:
            yield {**waiting, "status": render_banner(progress_text(), "loading")}


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
    """The words a visitor gets for ``e``: a GumihoError's message without this
    machine's paths, else a generic line (the details go to the server's log)."""
    if isinstance(e, GumihoError):
        return without_server_paths(str(e))
    log.exception("unexpected error in a request", exc_info=e)
    return f"Something went wrong ({type(e).__name__}); the app keeps serving, please try again."


# The server's own places, longest first, and what a message says instead: a message
# may name a file the app or the library found there, but not where this machine keeps it.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_HOME = os.path.expanduser("~")
SERVER_PATHS = sorted(((p, w) for p, w in ((_ROOT, "."), (_HOME, "~")) if len(p) > 1),
                      key=lambda pw: -len(pw[0]))


def without_server_paths(text: str) -> str:
    for path, word in SERVER_PATHS:
        # The place itself or a path inside it, not a longer name that starts the same way.
        text = re.sub(re.escape(path) + r"(?=[/\\'\"\s,;:)]|$)", lambda m: word, text)
    return text
