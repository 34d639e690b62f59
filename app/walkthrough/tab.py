"""The Walkthrough tab: one generation (app/walkthrough/steps.py), looked at one verify
step at a time, with Previous / Next, a slider and autoplay. It decodes with the
Race tab's drafter, and with the race's tree when asked to."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import gradio as gr

from ..core.forms import MAX_TEMPERATURE, WALK_MAX_NEW_TOKENS, RaceForm, as_given
from ..core.jobs import run_job
from ..core.page import GENERATE, Session, fail, job_outputs, placeholder, wire
from ..models.hub import ModelHub
from ..replays import Replays, shown_as_recorded
from ..views.render import render_banner
from .acceptance_panel import acceptance_panel
from .steps import (
    EXPLANATION,
    PAPER_TREE,
    PLAY_INTERVAL_S,
    TREE_CHOICES,
    TREE_LABELS,
    Walk,
    WalkProgress,
    choices_table,
    compute_walk,
    step_figure,
    step_header,
    text_so_far,
    tree_choice_of,
    walk_request,
)

# The autoplay button. Its symbols are ones every system font draws (U+23F8, the
# pause sign, is in emoji fonts only: elsewhere it is an empty box).
PLAY, PAUSE = "▶ Play", "‖ Pause"


@dataclass
class WalkTab:
    walk_btn: gr.Button  # enabled by the status poll once the model is ready


def add_walk_tab(hub: ModelHub, session: Session, examples: list[str], ready: bool, race_controls: dict,
                 replays: Replays) -> WalkTab:
    """The tab, inside the Blocks' Tabs, after the Race tab (whose settings it reads)."""
    with gr.Tab("Walkthrough", id="walk"):
        gr.Markdown("Step through one generation, **one verify step at a time**, with the Race tab's drafter. "
                    "Greedy by default; above temperature 0 each step shows the sampling test that keeps or "
                    "rejects every drafted token. Its tree is the paper's shape, deep enough for every head "
                    "of the drafter to show, unless you pick the race's tree.")
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(label="Prompt", lines=2, scale=4, value=examples[0], elem_id="gm-walk-prompt")
            with gr.Column(scale=1, min_width=160):
                tokens = gr.Slider(1, WALK_MAX_NEW_TOKENS, value=24, step=1, label="Max new tokens",
                                   elem_id="gm-walk-tokens")
                walk_btn = gr.Button("Generate and step through", variant="primary", interactive=ready,
                                     elem_id="gm-walk-run")
                live_btn = gr.Button("Run it live", visible=False, size="sm", elem_id="gm-walk-live")
        with gr.Row():
            tree = gr.Radio(TREE_CHOICES, value=PAPER_TREE, label="Tree", elem_id="gm-walk-tree-choice", scale=3,
                            info="The race's tree is the one the Race tab's settings give (depth, top-k, "
                                 "node budget, sized by cost or not).")
            # The one bound every temperature of the app has (app.core.forms.MAX_TEMPERATURE).
            temperature = gr.Slider(0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="Temperature (0 = greedy)",
                                    scale=2,
                                    elem_id="gm-walk-temperature", min_width=200)
            seed = gr.Number(0, precision=0, label="Seed (sampling)", scale=1, min_width=120,
                             elem_id="gm-walk-seed")
        status = gr.HTML("", elem_id="gm-walk-status")
        with gr.Row():
            prev_btn = gr.Button("◀ Previous step", interactive=False, elem_id="gm-walk-prev")
            play_btn = gr.Button(PLAY, interactive=False, elem_id="gm-walk-play")
            slider = gr.Slider(1, 2, value=1, step=1, label="Verify step", interactive=False,
                               elem_id="gm-walk-slider")
            next_btn = gr.Button("Next step ▶", interactive=False, elem_id="gm-walk-next")
        # Autoplay: off until Play; each tick shows the next step (walk_tick).
        timer = gr.Timer(PLAY_INTERVAL_S, active=False)
        playing = gr.State(False)
        view = {"head": gr.HTML("", elem_id="gm-walk-head"),
                "tree": gr.Plot(None, label="Draft tree", show_label=False, elem_id="gm-walk-tree"),
                "table": gr.HTML("", elem_id="gm-walk-table"),
                "test": gr.HTML("", elem_id="gm-walk-test"),
                "text": gr.HTML(placeholder("The text so far appears here; the current step is outlined."),
                                elem_id="gm-walk-text", elem_classes=["gm-tokens"])}  # what _walk_view fills
        gr.Markdown(EXPLANATION)

    play = {"playing": playing, "timer": timer, "play_btn": play_btn}
    nav = {"slider": slider, "prev_btn": prev_btn, "next_btn": next_btn, **view}
    # The walk's own prompt, token count and tree; the drafter, its tree settings and another model from the race.
    race_settings = {name: control for name, control in race_controls.items()
                     if name in WALK_CONTROLS}
    quiet = dict(queue=False, show_progress="hidden", api_visibility="private")
    # The button is off while a walk runs (a second press would only queue the same walk again),
    # and back, as the model's state allows, when it has ended however it ended.
    # An example at the starting settings is replayed from its recording (app/replays); Run it live
    # generates the same walk here and now.
    for button, live in ((walk_btn, False), (live_btn, True)):
        started = button.click(lambda: (gr.Button(interactive=False), gr.Button(visible=False)),
                               outputs=[walk_btn, live_btn], **quiet)
        ran = wire(started.then, walk_run,
                   {"prompt": prompt, "max_new_tokens": tokens, "walk_tree": tree, "temperature": temperature,
                    "seed": seed, **race_settings},
                   {"status": status, "walk": session.walk, "live_btn": live_btn, **nav, **play}, hub, replays, live,
                   concurrency_id=GENERATE, concurrency_limit=None, show_progress="hidden", api_visibility="private")
        ran.then(lambda: gr.Button(interactive=hub.ready), outputs=[walk_btn], **quiet)
    here = {"walk": session.walk, "slider": slider}
    wire(prev_btn.click, walk_previous, here, nav, **quiet)
    wire(next_btn.click, walk_next, here, nav, **quiet)
    wire(slider.release, walk_slide, here, nav, **quiet)
    wire(play_btn.click, walk_play, {**here, "playing": playing}, {**play, **nav}, **quiet)
    wire(timer.tick, walk_tick, {**here, "playing": playing}, {**play, **nav}, **quiet)
    return WalkTab(walk_btn)


# The race's form fields the walkthrough takes from the Race tab (its prompt, token
# count, temperature and seed are its own).
WALK_FORM_FIELDS = ("drafter", "tree_depth", "tree_top_k", "tree_nodes", "target", "drafter_path", "tree_cost_aware",
                    "copy_from_context", "tree_shape")
# The race's controls the walkthrough reads: its form's, and whether a tree control was moved.
WALK_CONTROLS = WALK_FORM_FIELDS + ("tree_touched",)


def stopped_play() -> dict:
    """Autoplay off: the playing state, the timer, the Play button. (Made per call: a
    component made here, at build time, would join the page.)"""
    return {"playing": False, "timer": gr.Timer(active=False), "play_btn": gr.Button(value=PLAY)}


def _nothing() -> dict:
    """Every output of a walkthrough as before any walk."""
    return {"walk": None, "slider": gr.Slider(interactive=False), "prev_btn": gr.Button(interactive=False),
            "next_btn": gr.Button(interactive=False), "play_btn": gr.Button(value=PLAY, interactive=False),
            "playing": False, "timer": gr.Timer(active=False), "head": "", "tree": None, "table": "", "test": "",
            "text": ""}


async def walk_run(hub: ModelHub, replays: Replays, live: bool, values: dict):
    """Yields the banner with the generation's progress while it runs, then the walk; an
    example at the starting settings is its recording, at once, unless ``live``."""
    progress = WalkProgress()
    try:
        given = as_given(values)
        form = RaceForm(**{name: given[name] for name in ("prompt", "max_new_tokens", "temperature", "seed",
                                                           *WALK_FORM_FIELDS)})
        req = walk_request(form, values["walk_tree"], hub.access)
        label = TREE_LABELS[tree_choice_of(req)]
        # No stop flag of a run's: run_job's own is set if the page goes away mid-walk.
        updates = run_job(hub, replays, "walkthrough", req, lambda stop: compute_walk(hub, req, stop, progress),
                          live=live, progress=progress, default_target=not req.target)
        async for out in job_outputs(updates, _walk_outputs, lambda walk, recorded_on: shown_as_recorded(
                _walk_outputs(walk), recorded_on, "walk"), lambda: progress.text(label)):
            yield out
    except Exception as e:
        yield {"status": fail(e), **_nothing()}


def _walk_outputs(walk: Walk) -> dict:
    if not walk.steps:
        return {"status": render_banner("The answer ended before the first verify step (it is one token long): try "
                                        "another prompt or more tokens.", "warn"), **_nothing()}
    note = f"{len(walk.steps)} verify steps for {len(walk.tokens)} tokens, with {walk.tree_label}."
    if walk.note:
        note += " " + walk.note
    n = len(walk.steps)
    return {"status": render_banner(note, "warn" if walk.note else "ready"), "walk": walk,
            "slider": gr.Slider(minimum=1, maximum=max(n, 2), value=1, step=1, interactive=n > 1),
            "prev_btn": gr.Button(interactive=False), "next_btn": gr.Button(interactive=n > 1),
            "play_btn": gr.Button(value=PLAY, interactive=n > 1), "playing": False, "timer": gr.Timer(active=False),
            **_walk_view(walk, 0)}


def walk_goto(walk: Optional[Walk], index, delta) -> dict:
    """The step ``delta`` away from the slider's ``index``, shown (nothing without a walk)."""
    if walk is None or not walk.steps:
        return {}
    i = _walk_index(walk, index, delta)
    n = len(walk.steps)
    return {"slider": gr.Slider(value=i + 1), "prev_btn": gr.Button(interactive=i > 0),
            "next_btn": gr.Button(interactive=i < n - 1), **_walk_view(walk, i)}


def walk_previous(values: dict) -> dict:
    return walk_goto(values["walk"], values["slider"], -1)


def walk_next(values: dict) -> dict:
    return walk_goto(values["walk"], values["slider"], +1)


def walk_slide(values: dict) -> dict:
    return walk_goto(values["walk"], values["slider"], 0)


def walk_play(values: dict) -> dict:
    """Play or Pause. Play at the last step starts again from the first."""
    walk = values["walk"]
    if values["playing"] or walk is None or len(walk.steps) < 2:
        return stopped_play()
    at_end = _walk_index(walk, values["slider"], 0) >= len(walk.steps) - 1
    return {"playing": True, "timer": gr.Timer(active=True), "play_btn": gr.Button(value=PAUSE),
            **(walk_goto(walk, 1, 0) if at_end else {})}


def walk_tick(values: dict) -> dict:
    """One autoplay step: the next verify step, and a stop at the last."""
    walk = values["walk"]
    if not values["playing"] or walk is None or not walk.steps:
        return stopped_play()
    i = _walk_index(walk, values["slider"], +1)
    ended = stopped_play() if i >= len(walk.steps) - 1 else {}
    return {**ended, **walk_goto(walk, i + 1, 0)}


def _walk_view(walk: Walk, i: int) -> dict:
    """The step's header, tree figure, table of choices and text so far."""
    return {"head": step_header(walk, i), "tree": step_figure(walk, i), "table": choices_table(walk, i),
            "test": acceptance_panel(walk, i), "text": text_so_far(walk, i)}


def _walk_index(walk: Walk, index, delta: int) -> int:
    """The 0-based step ``delta`` away from the slider's (1-based) ``index``, kept in range."""
    try:
        i = int(index) - 1 + delta
    except (TypeError, ValueError):
        i = 0
    return max(0, min(len(walk.steps) - 1, i))
