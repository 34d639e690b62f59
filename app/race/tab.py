"""The Race tab: the prompt and the settings, vanilla and Gumiho decoding of it side
by side, every token coloured by the head that drafted it, and the live figures.

A run is a chain of four events: :func:`start_race` checks the request,
:func:`race_compute` times both decoders on the model thread (app/race/run.py),
:func:`race_replay` replays the two columns with their recorded timestamps, and
:func:`end_race` restores the buttons.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Optional

import gradio as gr

from gumiho import CopySettings

from ..core.forms import (
    COPY_DEFAULT,
    DEVICE_TREE,
    MAX_TEMPERATURE,
    MAX_TREE_DEPTH,
    MAX_TREE_NODES,
    MAX_TREE_TOP_K,
    PAPER_SHAPE,
    SIZED_SHAPE,
    RaceForm,
    as_given,
    parse_request,
)
from ..core.jobs import RUNS, Control, run_job
from ..core.page import GENERATE, Session, bound, fail, job_outputs, placeholder, wire
from ..models.hub import ModelHub
from ..replays import Replays
from ..views.records import DrafterLayout, RaceResult
from ..views.render import render_banner, render_legend, render_run, render_stats
from .plots import RACE_PLOTS
from .replay import race_replay
from .run import TIMING_NOTE, Progress, compute_race
from .settings import TREE_SHAPES, advanced_note, paper_tree_note, tree_controls, weights_choices, weights_info
from .whatif import add_whatif

METRICS = """
**The numbers, exactly.** *tau* = new tokens / target forward passes (the prompt's prefill counts as one
forward that produced one token; vanilla has tau = 1). *Acceptance at position d* (bars) = share of verify
steps whose accepted draft length is ≥ d; *conditional acceptance* (line) = that share divided by the share
at d−1. *Speedup* = vanilla wall time / Gumiho wall time for the same tokens of the same prompt, both timed
in this process. *Predicted speedup* = (1 + a1 + a2 + … + a7) × t_forward / (t_draft + t_verify): a verify
step writes on average one bonus token plus the sum of the acceptance bars (a_d, the share of steps whose
accepted length reaches d), and costs one drafting pass (t_draft) and one verify forward (t_verify), where
vanilla pays one plain forward (t_forward) per token; all three times are this race's own means per step (the
mean, not the median, because the wall time pays every step, slow ones included). Where
it and the measured speedup differ, the prompt's reading and the steps' spread are the rest.
"""


@dataclass
class RaceTab:
    """The tab's components. The controls of the race's form carry the names of
    :class:`~app.core.forms.RaceForm`'s fields (:meth:`form_controls`); the walkthrough reads
    the drafter and tree settings from here, and the status poll enables Run and
    refreshes the menu."""

    prompt: gr.Textbox
    run_btn: gr.Button
    paper_btn: gr.Button  # the race with the paper's tree, in one click
    stop_btn: gr.Button
    live_btn: gr.Button  # shown after a recorded example's replay: time the same race here, now
    max_new_tokens: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    seed: gr.Number
    tree_depth: gr.Slider
    tree_top_k: gr.Slider
    tree_nodes: gr.Slider
    tree_cost_aware: gr.Checkbox
    tree_shape: gr.Radio
    tree_touched: gr.State  # whether the visitor moved a tree control (as_given)
    drafter: gr.Dropdown
    copy_from_context: gr.Checkbox
    target_weights: gr.Radio
    target: gr.Textbox
    drafter_path: gr.Textbox
    status: gr.HTML
    legend: gr.HTML
    ghosts: gr.Checkbox
    v_stats: gr.HTML
    v_html: gr.HTML
    g_stats: gr.HTML
    g_html: gr.HTML
    result_html: gr.HTML
    plots: dict  # RacePlot.elem_id -> gr.Plot, one per row of app.race.plots.RACE_PLOTS

    def form_controls(self) -> dict:
        """The control of each field of the race's form, by the field's name, and
        ``tree_touched`` (read the values with :func:`as_given`)."""
        return {**{f.name: getattr(self, f.name) for f in fields(RaceForm)}, "tree_touched": self.tree_touched}


def add_race_tab(hub: ModelHub, session: Session, examples: list[str], ready: bool, replays: Replays) -> RaceTab:
    """The tab, inside the Blocks' Tabs; ``ready``: whether the model is loaded already;
    ``replays``: the example prompts' recorded races and the races shared by link."""
    with gr.Tab("Race", id="race"):
        tab = _components(hub, examples, ready)
        add_whatif(session.race)
    _wire(tab, hub, session, replays)
    return tab


def _components(hub: ModelHub, examples: list[str], ready: bool) -> RaceTab:
    parts = _prompt_row(examples, ready)
    parts.update(_settings(hub))
    parts.update(_advanced(hub))
    parts.update(_columns_and_figures())
    return RaceTab(**parts)


def _prompt_row(examples: list[str], ready: bool) -> dict:
    with gr.Row(equal_height=True):
        prompt = gr.Textbox(label="Prompt", lines=3, max_lines=8, scale=5, elem_id="gm-prompt",
                            value=examples[0], placeholder="Ask the model something…")
        with gr.Column(scale=1, min_width=150):
            run_btn = gr.Button("Run the race", variant="primary", interactive=ready, elem_id="gm-run")
            paper_btn = gr.Button("Race with the paper's tree", interactive=ready, elem_id="gm-run-paper",
                                  size="sm")
            stop_btn = gr.Button("Stop", variant="stop", interactive=False, elem_id="gm-stop")
            live_btn = gr.Button("Run it live", visible=False, elem_id="gm-run-live", size="sm")
    # A dataset of our own rather than gr.Examples: its click is checked here (an index
    # sent by hand gets nothing, not the framework's IndexError).
    picker = gr.Dataset(components=[prompt], samples=[[p] for p in examples], type="index",
                        label="Example prompts", elem_id="gm-examples")
    picker.click(bound(pick_example, examples), inputs=[picker], outputs=[prompt], queue=False,
                 show_progress="hidden", api_visibility="private")
    return dict(prompt=prompt, run_btn=run_btn, paper_btn=paper_btn, stop_btn=stop_btn, live_btn=live_btn)


def _settings(hub: ModelHub) -> dict:
    with gr.Accordion("Settings", open=False):
        with gr.Row():
            max_new = gr.Slider(1, hub.settings.max_new_tokens, value=64, step=1, label="Max new tokens")
            temperature = gr.Slider(0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="Temperature (0 = greedy)")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
            # No minimum here: the framework's own check of it would end the run's chain of
            # events midway and leave the page waiting; parse_request says what is wrong.
            seed = gr.Number(0, precision=0, label="Seed (sampling)")
        tree_shape = gr.Radio(TREE_SHAPES, value=SIZED_SHAPE, label="Tree", elem_id="gm-tree-shape",
                              info=paper_tree_note())
        with gr.Row():
            depth = gr.Slider(1, MAX_TREE_DEPTH, value=DEVICE_TREE.depth, step=1, label="Tree depth", min_width=200)
            top_k = gr.Slider(1, MAX_TREE_TOP_K, value=DEVICE_TREE.serial_top_k, step=1, min_width=200,
                              label="Tree top-k", info="branching of the serial steps")
            budget = gr.Slider(1, MAX_TREE_NODES, value=DEVICE_TREE.total_tokens, step=1, min_width=200,
                               label="Tree node budget", elem_id="gm-budget",
                               info="drafted tokens per step (the most, when sized by cost)")
        with gr.Row():
            cost_aware = gr.Checkbox(DEVICE_TREE.cost_aware, label="Size trees by measured cost",
                                     info="keep only drafts likely enough to pay for the longer verify here",
                                     elem_id="gm-cost-aware", min_width=240)
            drafter = gr.Dropdown(choices=hub.drafter_choices(), value="gumiho", label="Drafter",
                                  elem_id="gm-drafter", min_width=300)
            copy_box = gr.Checkbox(COPY_DEFAULT, label="Copy from the context (green)",
                                   info="a third guesser: what followed the last tokens where they occurred before",
                                   elem_id="gm-copy", min_width=240)
        # Set by the visitor's own change of a tree control (`.input`, not the page's updates).
        touched = gr.State(False)
        for control in (depth, top_k, budget, cost_aware):
            control.input(lambda: True, outputs=[touched], queue=False, show_progress="hidden",
                          api_visibility="private")
        # The paper's tree ignores the controls: they show its values, greyed (settings.tree_controls).
        sized = gr.State(None)
        controls = {"depth": depth, "top_k": top_k, "budget": budget, "cost_aware": cost_aware}
        wire(tree_shape.change, lambda v: tree_controls(v["shape"], {k: v[k] for k in controls}, v["saved"]),
             {"shape": tree_shape, **controls, "saved": sized}, {**controls, "saved": sized}, queue=False,
             show_progress="hidden", api_visibility="private")
        choices = weights_choices(hub.runtime, hub.native_note)
        weights = gr.Radio(choices, value=choices[0][1], label="Target weights",
                           info=weights_info(hub.native_note), elem_id="gm-weights")
        gr.Markdown("Until you move a tree control, each race takes the tree of the weights it runs on (on the "
                    "4-bit weights, one draft per step). On a CPU extra tree nodes cost verify time, by an amount that depends on the CPU; "
                    "sized by cost, each step keeps a drafted token only when its chance of being "
                    "accepted pays for that time, as timed on this machine (once, a few seconds). On a "
                    "GPU trees of ~60 nodes cost little more than one token. "
                    "With temperature > 0 the two columns sample "
                    "different texts from the same distribution; at 0 they are identical.")
    return dict(max_new_tokens=max_new, temperature=temperature, top_p=top_p, seed=seed, tree_depth=depth,
                tree_top_k=top_k, tree_nodes=budget, tree_cost_aware=cost_aware, tree_shape=tree_shape, tree_touched=touched, drafter=drafter,
                copy_from_context=copy_box, target_weights=weights)


def _advanced(hub: ModelHub) -> dict:
    with gr.Accordion("Advanced: another target model", open=False):
        gr.Markdown(advanced_note(hub.access))
        with gr.Row():
            target_id = gr.Textbox(label="Target model id or folder (empty = default)", max_lines=1)
            drafter_path = gr.Textbox(label="Drafter folder (config.json + model.safetensors)", max_lines=1)
    return dict(target=target_id, drafter_path=drafter_path)


def _columns_and_figures() -> dict:
    status = gr.HTML("", elem_id="gm-status")
    gr.Markdown(TIMING_NOTE)
    with gr.Row(elem_classes=["gm-legend-row"]):  # on a phone the box goes under the legend (style.css)
        first_legend = DrafterLayout(copy=CopySettings().max_tokens if COPY_DEFAULT else 0,
                                     tree_depth=DEVICE_TREE.depth)
        legend = gr.HTML(render_legend(first_legend), elem_id="gm-legend")
        ghosts = gr.Checkbox(False, label="Show rejected drafts", elem_id="gm-ghosts", scale=0, min_width=260,
                             info="struck through, after the word they were rejected in")
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.HTML('<div class="gm-col-title">Vanilla decoding: one target forward per token</div>')
            v_stats = gr.HTML(render_stats(None), elem_id="gm-vanilla-stats")
            v_html = gr.HTML(placeholder("Vanilla output appears here."), elem_id="gm-vanilla",
                             elem_classes=["gm-tokens"])
        with gr.Column():
            gr.HTML('<div class="gm-col-title">Gumiho speculative decoding: a draft tree per target forward</div>')
            g_stats = gr.HTML(render_stats(None), elem_id="gm-gumiho-stats")
            g_html = gr.HTML(placeholder("Gumiho output appears here, coloured by the head that drafted each "
                                         "token."), elem_id="gm-gumiho", elem_classes=["gm-tokens"])
    result_html = gr.HTML("", elem_id="gm-result")
    plots = {}
    for row in sorted({p.row for p in RACE_PLOTS}):
        with gr.Row():
            for plot in (p for p in RACE_PLOTS if p.row == row):
                plots[plot.elem_id] = gr.Plot(plot.empty(first_legend), label=plot.title, elem_id=plot.elem_id)
    gr.Markdown(METRICS)
    return dict(status=status, legend=legend, ghosts=ghosts, v_stats=v_stats, v_html=v_html, g_stats=g_stats,
                g_html=g_html, result_html=result_html, plots=plots)


def _wire(t: RaceTab, hub: ModelHub, session: Session, replays: Replays) -> None:
    _race_steps(t.run_btn.click, t, hub, session, replays)
    # The same race, timed here and now even where a recording of it exists.
    _race_steps(t.live_btn.click, t, hub, session, replays, live=True)
    # One click: the paper's tree is chosen (the menu shows it), then the same race runs.
    chosen = t.paper_btn.click(lambda: PAPER_SHAPE, outputs=[t.tree_shape], queue=False, show_progress="hidden",
                               api_visibility="private")
    _race_steps(chosen.then, t, hub, session, replays)
    quiet = dict(queue=False, show_progress="hidden", api_visibility="private")
    wire(t.stop_btn.click, stop_race, {"run_id": session.run_id}, {"status": t.status}, **quiet)
    wire(t.ghosts.change, toggle_ghosts, {"show": t.ghosts, "run_id": session.run_id, "race": session.race},
         {"g_html": t.g_html}, **quiet)


def _race_steps(start, t: RaceTab, hub: ModelHub, session: Session, replays: Replays, live: bool = False) -> None:
    """The run's chain of events, begun by ``start`` (an event's ``click`` or ``then``),
    each wired by name (app.core.page.wire). An example prompt at the recorded settings
    replays its recording unless ``live``."""
    columns = {"v_html": t.v_html, "g_html": t.g_html, "v_stats": t.v_stats, "g_stats": t.g_stats,
               "result_html": t.result_html, "status": t.status}
    buttons = {"run_btn": t.run_btn, "paper_btn": t.paper_btn, "stop_btn": t.stop_btn, "live_btn": t.live_btn}
    hidden = dict(show_progress="hidden", api_visibility="private")
    # Queued (with no limit: it does no model work) so that its message can be a toast too.
    started = wire(start, start_race, {**t.form_controls(), "show_rejected": t.ghosts},
                   {"run_id": session.run_id, "request": session.request, **buttons, **columns}, hub,
                   concurrency_limit=None, **hidden)
    computed = wire(started.then, race_compute, {"run_id": session.run_id, "request": session.request},
                    {"race": session.race, "status": t.status, "legend": t.legend}, hub, replays, live,
                    concurrency_id=GENERATE, concurrency_limit=None, show_progress="minimal",
                    api_visibility="private")
    replayed = wire(computed.then, race_replay, {"run_id": session.run_id, "race": session.race},
                    {**columns, **t.plots}, concurrency_limit=None, **hidden)
    wire(replayed.then, end_race, {"run_id": session.run_id, "race": session.race}, buttons, hub, queue=False,
         **hidden)


def pick_example(examples: list[str], index):
    """The prompt of example ``index``; nothing for anything else."""
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(examples):
        return examples[index]
    return gr.skip()


# ----------------------------------------------------------------------------- the run's events


def start_race(hub: ModelHub, values: dict) -> dict:
    """Checks the request (and is the only step that reads the controls: should
    the web framework's own check of a control fail here, nothing has been
    disabled yet, so the page stays usable). A bad request ends the run here
    with its message, and the steps after it only restore the buttons: Run is
    disabled until they have (end_race), so a click in between cannot start a
    run whose buttons the refused run's last step would then reset."""
    try:
        given = as_given(values)
        req = parse_request(RaceForm(**{f.name: given[f.name] for f in fields(RaceForm)}), hub.access,
                            settings=hub.settings)
    except Exception as e:
        return {"run_id": "", "request": None, "run_btn": gr.Button(interactive=False),
                "paper_btn": gr.Button(interactive=False), "status": fail(e)}
    return {"run_id": RUNS.new(values["show_rejected"]), "request": req, "run_btn": gr.Button(interactive=False),
            "paper_btn": gr.Button(interactive=False), "stop_btn": gr.Button(interactive=True),
            "live_btn": gr.Button(visible=False),
            "status": render_banner("Waiting for a free slot (one generation runs at a time)…", "info"),
            "v_html": "", "g_html": "", "v_stats": render_stats(None), "g_stats": render_stats(None),
            "result_html": ""}


async def race_compute(hub: ModelHub, replays: Replays, live: bool, values: dict):
    req = values["request"]
    if req is None:  # refused by start_race, which said why
        yield {"race": None}
        return
    ctl = RUNS.get(values["run_id"]) or Control()
    progress = Progress()

    def finished(result: RaceResult) -> dict:
        note = ("Replaying both runs side by side with their recorded timestamps…" if not result.vanilla.stopped
                else "Stopped.")
        if not (result.vanilla.stopped or result.gumiho.stopped):  # a finished race can be shared by link
            result.run_id = values["run_id"]
            replays.shared.put(result.run_id, "race", result)
        return {"race": result, "status": render_banner(note, "info"), "legend": render_legend(result.gumiho.layout)}

    def recorded(result: RaceResult, recorded_on: str) -> dict:  # an example at its recorded settings: at once
        return {"race": dataclasses.replace(result, recorded_on=recorded_on, run_id=""),
                "status": render_banner(f"Replaying this example's recorded race (recorded on {recorded_on})…",
                                        "info"), "legend": render_legend(result.gumiho.layout)}

    updates = run_job(hub, replays, "race", req, lambda stop: compute_race(hub, req, stop, progress), live=live,
                      stop=ctl.stop, progress=progress, default_target=not req.target)
    try:
        async for out in job_outputs(updates, finished, recorded, progress.text, waiting={"race": None}):
            yield out
    except Exception as e:  # every failure becomes a message; the app keeps serving
        yield {"race": None, "status": fail(e)}


def end_race(hub: ModelHub, values: dict) -> dict:
    RUNS.end(values["run_id"])
    can_run = hub.ready or hub.state == "error"
    race: Optional[RaceResult] = values.get("race")
    return {"run_btn": gr.Button(interactive=can_run), "paper_btn": gr.Button(interactive=can_run),
            "stop_btn": gr.Button(interactive=False),
            "live_btn": gr.Button(visible=bool(race is not None and race.recorded_on), interactive=can_run)}


def stop_race(values: dict) -> dict:
    if not RUNS.stop(values["run_id"]):  # no run of this session's in flight: nothing to stop, nothing to say
        return {}
    return {"status": render_banner("Stopping both columns…", "info")}


def toggle_ghosts(values: dict) -> dict:
    ctl = RUNS.get(values["run_id"])
    if ctl is not None:  # a run is in flight: its replay picks the toggle up
        ctl.show_rejected = bool(values["show"])
        return {}
    result: Optional[RaceResult] = values["race"]
    if result is None or not result.gumiho.events:
        return {}
    return {"g_html": render_run(result.gumiho, None, bool(values["show"]))}
