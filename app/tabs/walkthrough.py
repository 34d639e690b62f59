"""The Walkthrough tab: one generation (app/walkthrough.py), looked at one verify
step at a time, with Previous / Next, a slider and autoplay. It decodes with the
Race tab's drafter, and with the race's tree when asked to."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

import gradio as gr

from ..hub import ModelHub
from ..inputs import WALK_MAX_NEW_TOKENS
from ..race import in_background, until_ready
from ..render import render_banner
from ..walkthrough import EXPLANATION, PAPER_TREE, PLAY_INTERVAL_S, TREE_CHOICES, TREE_LABELS, Walk, WalkProgress, \
    choices_table, compute_walk, step_figure, step_header, text_so_far, tree_choice_of, walk_request
from .race import RaceTab
from .shared import GENERATE, Session, bound, fail, placeholder

# The autoplay button. Its symbols are ones every system font draws (U+23F8, the
# pause sign, is in emoji fonts only: elsewhere it is an empty box).
PLAY, PAUSE = "▶ Play", "‖ Pause"


@dataclass
class WalkTab:
    walk_btn: gr.Button  # enabled by the status poll once the model is ready


def add_walk_tab(hub: ModelHub, session: Session, examples: list[str], ready: bool, race: RaceTab) -> WalkTab:
    """The tab, inside the Blocks' Tabs, after the Race tab (whose settings it reads)."""
    with gr.Tab("Walkthrough", id="walk"):
        gr.Markdown("Step through one generation, **one verify step at a time**. It uses greedy decoding "
                    "and the Race tab's drafter. Its tree is the paper's shape, deep enough for every head "
                    "of the drafter to show, unless you pick the race's tree.")
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(label="Prompt", lines=2, scale=4, value=examples[0], elem_id="gm-walk-prompt")
            with gr.Column(scale=1, min_width=160):
                tokens = gr.Slider(1, WALK_MAX_NEW_TOKENS, value=24, step=1, label="Max new tokens")
                walk_btn = gr.Button("Generate and step through", variant="primary", interactive=ready,
                                     elem_id="gm-walk-run")
        tree = gr.Radio(TREE_CHOICES, value=PAPER_TREE, label="Tree", elem_id="gm-walk-tree-choice",
                        info="The race's tree is the one the Race tab's settings give (depth, top-k, "
                             "node budget, sized by cost or not).")
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
        view = [gr.HTML("", elem_id="gm-walk-head"), gr.Plot(None, label="Draft tree", elem_id="gm-walk-tree"),
                gr.HTML("", elem_id="gm-walk-table"),
                gr.HTML(placeholder("The text so far appears here; the current step is outlined."),
                        elem_id="gm-walk-text", elem_classes=["gm-tokens"])]  # what _walk_view fills
        gr.Markdown(EXPLANATION)

    play_outputs = [playing, timer, play_btn]
    walk_btn.click(bound(walk_run, hub),
                   inputs=[prompt, tokens, tree, race.drafter, race.depth, race.top_k, race.budget, race.target_id,
                           race.drafter_path, race.cost_aware, race.copy_box, race.tree_shape],
                   outputs=[status, session.walk, slider, prev_btn, next_btn, play_btn, playing, timer] + view,
                   concurrency_id=GENERATE, concurrency_limit=None, show_progress="hidden",
                   api_visibility="private")
    nav_outputs = [slider, prev_btn, next_btn] + view
    here = [session.walk, slider]
    # Lambdas, not bound functions: the page's endpoints for these three are named "lambda", "lambda_1" and
    # "lambda_2" after them.
    prev_btn.click(lambda w, i: walk_goto(w, i, -1), inputs=here, outputs=nav_outputs, queue=False,
                   show_progress="hidden", api_visibility="private")
    next_btn.click(lambda w, i: walk_goto(w, i, +1), inputs=here, outputs=nav_outputs, queue=False,
                   show_progress="hidden", api_visibility="private")
    slider.release(lambda w, i: walk_goto(w, i, 0), inputs=here, outputs=nav_outputs, queue=False,
                   show_progress="hidden", api_visibility="private")
    play_inputs = [session.walk, slider, playing]
    play_btn.click(walk_play, inputs=play_inputs, outputs=play_outputs + nav_outputs, queue=False,
                   show_progress="hidden", api_visibility="private")
    timer.tick(walk_tick, inputs=play_inputs, outputs=play_outputs + nav_outputs, queue=False,
               show_progress="hidden", api_visibility="private")
    return WalkTab(walk_btn)


def stopped_play():
    """Autoplay off: the playing state, the timer, the Play button. (Made per call: a
    component made here, at build time, would join the page.)"""
    return False, gr.Timer(active=False), gr.Button(value=PLAY)


async def walk_run(hub: ModelHub, prompt_v, tokens_v, tree_v, kind_v, depth_v, top_k_v, budget_v, target_v,
                   drafter_path_v, cost_aware_v=None, copy_v=None, race_shape_v=None):
    """Yields the banner with the generation's progress while it runs, then the walk."""
    nothing = (None, gr.Slider(interactive=False), gr.Button(interactive=False), gr.Button(interactive=False),
               gr.Button(value=PLAY, interactive=False), False, gr.Timer(active=False), "", None, "", "")
    progress = WalkProgress()
    try:
        req = walk_request(prompt_v, tokens_v, tree_v, depth_v, top_k_v, budget_v, kind_v, target_v,
                           drafter_path_v, cost_aware=cost_aware_v, access=hub.access, copy=copy_v,
                           race_shape=race_shape_v)
        label = TREE_LABELS[tree_choice_of(req)]
        if not req.target_id and not hub.wait_ready(0):
            yield (render_banner("Waiting for the model to finish loading…", "loading"),) + UNCHANGED
            await until_ready(hub)
        stop = threading.Event()  # set if the page goes away mid-walk
        walk = None
        async for item in in_background(lambda: compute_walk(hub, req, stop, progress), hub.submit, stop=stop):
            if item is None:
                yield (render_banner(progress.text(label), "loading"),) + UNCHANGED
            else:
                walk = item
    except Exception as e:
        yield (fail(e),) + nothing
        return
    yield _walk_outputs(walk, nothing)


UNCHANGED = (gr.skip(),) * 11  # every output of walk_run but its banner


def _walk_outputs(walk: Walk, nothing: tuple) -> tuple:
    if not walk.steps:
        return (render_banner("The answer ended before the first verify step (it is one token long): try "
                              "another prompt or more tokens.", "warn"),) + nothing
    note = (f"{len(walk.steps)} verify steps for {sum(len(v.tokens) for v in walk.views)} tokens, with "
            f"{walk.tree_label}.")
    if walk.note:
        note += " " + walk.note
    n = len(walk.steps)
    return ((render_banner(note, "warn" if walk.note else "ready"), walk,
             gr.Slider(minimum=1, maximum=max(n, 2), value=1, step=1, interactive=n > 1),
             gr.Button(interactive=False), gr.Button(interactive=n > 1),
             gr.Button(value=PLAY, interactive=n > 1), False, gr.Timer(active=False))
            + _walk_view(walk, 0))


def walk_goto(walk: Optional[Walk], index, delta):
    if walk is None or not walk.steps:
        return (gr.skip(),) * 7
    i = _walk_index(walk, index, delta)
    n = len(walk.steps)
    return (gr.Slider(value=i + 1), gr.Button(interactive=i > 0), gr.Button(interactive=i < n - 1)) + \
        _walk_view(walk, i)


def walk_play(walk: Optional[Walk], index, playing):
    """Play or Pause. Play at the last step starts again from the first."""
    if playing or walk is None or len(walk.steps) < 2:
        return stopped_play() + (gr.skip(),) * 7
    at_end = _walk_index(walk, index, 0) >= len(walk.steps) - 1
    return (True, gr.Timer(active=True), gr.Button(value=PAUSE)) + \
        (walk_goto(walk, 1, 0) if at_end else (gr.skip(),) * 7)


def walk_tick(walk: Optional[Walk], index, playing):
    """One autoplay step: the next verify step, and a stop at the last."""
    if not playing or walk is None or not walk.steps:
        return stopped_play() + (gr.skip(),) * 7
    i = _walk_index(walk, index, +1)
    ended = stopped_play() if i >= len(walk.steps) - 1 else (gr.skip(),) * 3
    return ended + walk_goto(walk, i + 1, 0)


def _walk_view(walk: Walk, i: int) -> tuple:
    """The step's header, tree figure, table of choices and text so far."""
    return step_header(walk, i), step_figure(walk, i), choices_table(walk, i), text_so_far(walk, i)


def _walk_index(walk: Walk, index, delta: int) -> int:
    """The 0-based step ``delta`` away from the slider's (1-based) ``index``, kept in range."""
    try:
        i = int(index) - 1 + delta
    except (TypeError, ValueError):
        i = 0
    return max(0, min(len(walk.steps) - 1, i))
