"""The top of the page: the header, the status banner, and the poll that keeps both
run buttons and the drafter menu in step with the model as it loads."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ..core.page import bound
from ..models.hub import ModelHub
from ..race.settings import weights_choices, weights_info
from ..views.render import render_banner

HEADER = """<div class="gm-header"><h1>Gumiho speculative decoding, made visible</h1>
<p>A small drafter guesses the next tokens (a serial Transformer for positions 1–2, parallel MLP heads for 3–7);
the target model checks the whole draft tree in one forward pass and keeps the longest prefix it agrees with.
The answer is exactly the target's own &mdash; only faster when the guesses are good.</p></div>"""


@dataclass
class Status:
    banner: gr.HTML
    timer: gr.Timer  # polls until the model is ready or has failed


def add_status(hub: ModelHub) -> Status:
    gr.HTML(HEADER)
    banner = gr.HTML(render_banner(*hub.status()), elem_id="gm-banner")
    return Status(banner, gr.Timer(1.0, active=True))


def poll(hub: ModelHub, status: Status, other_models: list, default_model: list, drafter: gr.Dropdown,
         weights: gr.Radio) -> dict:
    """The banner, the buttons, the drafter menu and the weights choice as the model's
    state says: buttons that can run another model are enabled once the default model
    is ready or has failed; buttons that need the default model, once it is ready; the
    4-bit weights marked unavailable, with the reason, once the load found that runtime
    dead here."""
    level, text = hub.status()
    done = hub.state in ("ready", "error")
    can_run = hub.ready or hub.state == "error"  # after an error, other models can still be tried
    note = hub.native_note
    return {status.banner: render_banner(text, level),
            **{b: gr.Button(interactive=can_run) for b in other_models},
            **{b: gr.Button(interactive=hub.ready) for b in default_model},
            drafter: gr.Dropdown(choices=hub.drafter_choices()), status.timer: gr.Timer(active=not done),
            weights: gr.Radio(choices=weights_choices(hub.runtime, note), info=weights_info(note, hub.runtime_choice))}


def wire_status(demo: gr.Blocks, hub: ModelHub, status: Status, other_models: list, default_model: list,
                drafter: gr.Dropdown, weights: gr.Radio) -> None:
    """Poll on page load and then every second until the model is ready or has failed
    (``other_models``: the race's buttons, which can also run a model given by name;
    ``default_model``: the walkthrough's and the comparison's; the drafter menu and the
    weights choice: the race's)."""
    outputs = [status.banner, *other_models, *default_model, drafter, weights, status.timer]
    call = bound(poll, hub, status, list(other_models), list(default_model), drafter, weights)
    # One callable for both events: the endpoints "poll" and "poll_1".
    demo.load(call, outputs=outputs, queue=False, show_progress="hidden", api_visibility="private")
    status.timer.tick(call, outputs=outputs, queue=False, show_progress="hidden", api_visibility="private")
