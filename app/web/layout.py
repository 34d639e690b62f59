"""The Gradio Blocks, assembled from the page's parts (each feature's tab): the header and
status banner, the Race tab (vanilla vs Gumiho), the Walkthrough tab, the Compare
tab (every shipped drafter side by side), the Lossless? tab (the losslessness check)
and the ``/race``, ``/walkthrough``, ``/compare`` and ``/lossless_check`` endpoints
(app/web/api.py). Each part adds its components and wires its own events; how the
model-running events share the queue, and what a session keeps, is said in
app/core/page.py; the server's settings come with the hub (ModelHub.settings).
"""
from __future__ import annotations

import json
import os
from typing import Optional

import gradio as gr

from ..compare.tab import add_compare_tab
from ..core.page import fail as _fail  # noqa: F401
from ..core.page import new_session
from ..lossless.tab import add_lossless_tab
from ..models.hub import ModelHub
from ..race.links import add_shared_runs

# Reached as app.web.layout.<name> by the tests and by callers from before the page had
# parts: the error path, the autoplay button's words, the /race work, and the model
# work the page runs (a ZeroGPU Space must see it wrapped for the GPU, app/core/zerogpu.py).
from ..race.run import compute_race  # noqa: F401
from ..race.tab import add_race_tab
from ..replays import Replays, SharedRuns
from ..walkthrough.steps import compute_walk  # noqa: F401
from ..walkthrough.tab import PAUSE, PLAY, add_walk_tab  # noqa: F401
from .api import (
    add_api,
    api_race,  # noqa: F401
)
from .status import add_status, wire_status

RESIZE_PLOTS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 100); }"

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "assets")


def load_css() -> str:
    with open(os.path.join(ASSETS, "style.css"), encoding="utf-8") as f:
        return f.read()


def load_examples() -> list[str]:
    try:
        with open(os.path.join(ASSETS, "examples.json"), encoding="utf-8") as f:
            return [p for p in json.load(f)["prompts"] if isinstance(p, str) and p.strip()]
    except (OSError, ValueError, KeyError):
        return ["Write a short poem about the sea."]


def build_app(hub: Optional[ModelHub] = None, replays: Optional[Replays] = None) -> gr.Blocks:
    hub = hub or ModelHub()
    settings = hub.settings
    replays = replays or Replays(hub, settings.recordings_file, SharedRuns(settings.shared_runs, settings.shared_dir))
    examples = load_examples()
    ready = hub.ready  # the run buttons start enabled only if the model is loaded already

    with gr.Blocks(title="Gumiho speculative decoding") as demo:
        status = add_status(hub)
        session = new_session()
        # Tabs that do not fit the width wrap onto another row (issue 76: at 390 px Compare
        # and Lossless? hid behind the framework's "More tabs" menu).
        with gr.Tabs(overflow_behavior="wrap") as tabs:
            race = add_race_tab(hub, session, examples, ready, replays)
            walk = add_walk_tab(hub, session, examples, ready, race.form_controls(), replays)
            compare = add_compare_tab(hub, examples, ready, race.form_controls(), replays)
            lossless = add_lossless_tab(hub, examples, ready, replays)
        # A plot resizes with the window only while it is shown: one on a hidden tab keeps
        # its old width, its end cut off, when its tab comes back. A resize event once the
        # tab is shown lets every plot on it take its box's width again (in the browser alone).
        tabs.select(None, js=RESIZE_PLOTS, queue=False, show_progress="hidden", api_visibility="private")
        wire_status(demo, hub, status, [race.run_btn, race.paper_btn],
                    [walk.walk_btn, compare.run_btn, compare.paper_btn, lossless.run_btn], race.drafter, race.target_weights)
        add_shared_runs(demo, race, session, replays)
        demo.api_defaults = add_api(hub, replays)  # read by app.web.checks.requests (app/web/server.py)

    demo.queue(max_size=settings.queue_limit, default_concurrency_limit=None)
    return demo


__all__ = ["build_app", "load_css"]
