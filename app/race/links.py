"""A race shared by link: the page opened with ``?run=<id>`` replays that run in the
Race tab, as it was timed, for whoever opens it (a teacher races once and sends one
link to a class). The runs are kept by app.replays.SharedRuns."""
from __future__ import annotations

import gradio as gr

from ..core.page import Session, wire
from ..replays import Replays
from ..views.render import render_banner
from .replay import race_replay
from .tab import RaceTab

GONE = ("The race this link points to is not kept here any more (the server keeps only its last {n} shared runs), "
        "or the link is mistyped: run the race again and share its new link.")


def add_shared_runs(demo: gr.Blocks, t: RaceTab, session: Session, replays: Replays) -> None:
    """At every page load: a ``run`` in the address replays that race."""
    def open_shared_run(request: gr.Request):
        run_id = request.query_params.get("run", "") if request is not None else ""
        if not run_id:
            return gr.skip(), gr.skip()
        race = replays.shared.get(run_id.strip().lower(), "race")
        if race is None:
            return None, render_banner(GONE.format(n=replays.shared.limit), "error")
        return race, render_banner("Replaying a shared race, with the timestamps it was timed with…", "info")

    opened = demo.load(open_shared_run, inputs=None, outputs=[session.race, t.status], show_progress="hidden",
                       api_visibility="private")
    columns = {"v_html": t.v_html, "g_html": t.g_html, "v_stats": t.v_stats, "g_stats": t.g_stats,
               "result_html": t.result_html, "status": t.status}
    wire(opened.then, race_replay, {"run_id": session.run_id, "race": session.race}, {**columns, **t.plots},
         concurrency_limit=None, show_progress="hidden", api_visibility="private")
