"""The Compare tab: one prompt decoded by vanilla and by every shipped drafter
(app/compare/run.py), with the Race tab's tree (or the paper's, one click away) and
target weights for all of them: acceptance by position, one line per drafter; where
each step's time goes; tau, tokens/s, speedup and size; and what the figures say.

A run is a chain of three events, as the race's: :func:`start_compare` checks the
request and disables the buttons, :func:`compare_compute` times every decoder on
the model thread and shows the result, :func:`end_compare` restores the buttons.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import gradio as gr

from ..core.forms import PAPER_SHAPE, as_given
from ..core.jobs import RUNS, Control, run_job
from ..core.page import GENERATE, fail, job_outputs, placeholder, wire
from ..models.hub import ModelHub
from ..replays import Replays, shown_as_recorded
from ..views.render import esc, machine_busy_note, render_banner
from .figures import SHORT, acceptance_lines, step_time_figure
from .run import COMPARE_MAX_NEW_TOKENS, CompareForm, CompareProgress, Comparison, compute_compare, parse_compare
from .summary import findings, step_time

INTRO = ("**The paper's trade on one screen.** Gumiho gives the first draft positions, which matter most, to a "
         "serial Transformer and the later ones to cheap parallel MLP heads. Here one prompt is decoded by "
         "vanilla decoding and by every drafter shipped for this model: Gumiho's hybrid, an all-serial and an "
         "all-parallel drafter, and EAGLE-3 (the table gives each one's size), all with the **same tree** (the "
         "Race tab's settings, or the paper's tree) and the same target weights, greedy. They take turns on this "
         "machine a step at a time, each on its own clock, as in the race.")

# The race's form fields the comparison takes from the Race tab: one tree and one runtime for every drafter.
RACE_FIELDS = ("tree_depth", "tree_top_k", "tree_nodes", "tree_cost_aware", "tree_shape", "tree_touched",
               "target_weights")
PLOT_IDS = ("gm-cmp-acc", "gm-cmp-cond", "gm-cmp-time")


@dataclass
class CompareTab:
    run_btn: gr.Button  # enabled by the status poll once the model is ready
    paper_btn: gr.Button


def add_compare_tab(hub: ModelHub, examples: list[str], ready: bool, race_controls: dict, replays: Replays) -> CompareTab:
    """The tab, inside the Blocks' Tabs, after the Race tab (whose tree and weights it reads)."""
    with gr.Tab("Compare drafters", id="compare"):
        gr.Markdown(INTRO)
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(label="Prompt", lines=2, max_lines=8, scale=5, value=examples[0],
                                elem_id="gm-cmp-prompt")
            with gr.Column(scale=1, min_width=170):
                run_btn = gr.Button("Compare the drafters", variant="primary", interactive=ready,
                                    elem_id="gm-cmp-run")
                paper_btn = gr.Button("Compare with the paper's tree", interactive=ready, size="sm",
                                      elem_id="gm-cmp-run-paper")
                stop_btn = gr.Button("Stop", variant="stop", interactive=False, elem_id="gm-cmp-stop")
                live_btn = gr.Button("Run it live", visible=False, size="sm", elem_id="gm-cmp-live")
        with gr.Row():
            tokens = gr.Slider(1, COMPARE_MAX_NEW_TOKENS, value=64, step=1, label="Max new tokens", min_width=220,
                               elem_id="gm-cmp-tokens")
            copy_alone = gr.Checkbox(False, label="Also: copying alone", elem_id="gm-cmp-copy",
                                     info="the copy proposer with no learned drafter", min_width=220)
            with_copy = gr.Checkbox(False, label="Also: Gumiho + copying", elem_id="gm-cmp-gumiho-copy",
                                    info="the copy proposer beside Gumiho's heads", min_width=220)
        status = gr.HTML("", elem_id="gm-cmp-status")
        found = gr.HTML(placeholder("What the comparison shows appears here, written from its figures."),
                        elem_id="gm-cmp-findings")
        table = gr.HTML("", elem_id="gm-cmp-table")
        with gr.Row():
            acc = gr.Plot(acceptance_lines(None), label="Acceptance by position", elem_id=PLOT_IDS[0])
            cond = gr.Plot(acceptance_lines(None, conditional=True), label="Conditional acceptance",
                           elem_id=PLOT_IDS[1])
        time_plot = gr.Plot(step_time_figure(None), label="Time per step", elem_id=PLOT_IDS[2])
        text = gr.HTML("", elem_id="gm-cmp-text")
        run_id = gr.State("")
        request = gr.State(None)

    controls = {"prompt": prompt, "max_new_tokens": tokens, "copy_alone": copy_alone, "gumiho_with_copy": with_copy,
                **{name: control for name, control in race_controls.items() if name in RACE_FIELDS}}
    buttons = {"run_btn": run_btn, "paper_btn": paper_btn, "stop_btn": stop_btn, "live_btn": live_btn}
    shown = {"status": status, "findings": found, "table": table, "acc": acc, "cond": cond, "time": time_plot,
             "text": text, "live_btn": live_btn}
    hidden = dict(show_progress="hidden", api_visibility="private")
    # An example at the starting settings is answered from its recording (app/replays); Run it live
    # computes the same comparison here and now.
    for button, paper, live in ((run_btn, False, False), (paper_btn, True, False), (live_btn, False, True)):
        started = wire(button.click, start_compare, controls, {"run_id": run_id, "request": request, **buttons,
                                                               **shown}, hub, paper, concurrency_limit=None, **hidden)
        computed = wire(started.then, compare_compute, {"run_id": run_id, "request": request}, shown, hub, replays,
                        live, concurrency_id=GENERATE, concurrency_limit=None, **hidden)
        wire(computed.then, end_compare, {"run_id": run_id}, buttons, hub, queue=False, **hidden)
    wire(stop_btn.click, stop_compare, {"run_id": run_id}, {"status": status}, queue=False, **hidden)
    return CompareTab(run_btn, paper_btn)


def start_compare(hub: ModelHub, paper: bool, values: dict) -> dict:
    """Checks the request; a bad one ends the run here with its message (the buttons
    stay disabled until end_compare restores them, as the race's do)."""
    try:
        given = as_given(values)
        form = CompareForm(**{f.name: given[f.name] for f in fields(CompareForm) if f.name in given})
        if paper:
            form.tree_shape = PAPER_SHAPE
        req = parse_compare(form, hub.access)
    except Exception as e:
        return {"run_id": "", "request": None, "run_btn": gr.Button(interactive=False),
                "paper_btn": gr.Button(interactive=False), "status": fail(e)}
    return {"run_id": RUNS.new(), "request": req, "run_btn": gr.Button(interactive=False),
            "paper_btn": gr.Button(interactive=False), "stop_btn": gr.Button(interactive=True),
            "live_btn": gr.Button(visible=False),
            "status": render_banner("Waiting for a free slot (one generation runs at a time)…", "info"),
            "findings": "", "table": "", "text": "", "acc": acceptance_lines(None),
            "cond": acceptance_lines(None, conditional=True), "time": step_time_figure(None)}


async def compare_compute(hub: ModelHub, replays: Replays, live: bool, values: dict):
    req = values["request"]
    if req is None:  # refused by start_compare, which said why
        yield {}
        return
    ctl = RUNS.get(values["run_id"]) or Control()
    progress = CompareProgress()
    updates = run_job(hub, replays, "compare", req, lambda stop: compute_compare(hub, req, stop, progress), live=live,
                      stop=ctl.stop, progress=progress)
    try:
        async for out in job_outputs(updates, comparison_outputs, lambda cmp, recorded_on: shown_as_recorded(
                comparison_outputs(cmp), recorded_on, "comparison"), progress.text):
            yield out
    except Exception as e:  # every failure becomes a message; the app keeps serving
        yield {"status": fail(e)}


def comparison_outputs(cmp: Comparison) -> dict:
    level = "info" if cmp.stopped else "warn" if cmp.skipped else "ready"
    note = (f"Compared {len(cmp.drafters)} drafters with vanilla on {cmp.model} ({cmp.weights}, {cmp.runtime}); "
            f"tree: {cmp.tree.total_tokens} drafted tokens to depth {cmp.tree.depth}.")
    if cmp.skipped:
        note += " Not run: " + "; ".join(f"{s.label}: {s.reason}" for s in cmp.skipped)
    busy = machine_busy_note(cmp.machine, "these speedups and step times cannot be trusted; tau and acceptance "
                                          "can (they do not depend on the clock). Compare again")
    return {"status": render_banner(note, level) + (render_banner(busy, "warn") if busy else ""), "findings": render_findings(cmp), "table": render_table(cmp),
            "acc": acceptance_lines(cmp), "cond": acceptance_lines(cmp, conditional=True),
            "time": step_time_figure(cmp), "text": render_text(cmp)}


def end_compare(hub: ModelHub, values: dict) -> dict:
    """The buttons back: Compare only with the default model loaded (its drafters are the ones compared)."""
    RUNS.end(values["run_id"])
    return {"run_btn": gr.Button(interactive=hub.ready), "paper_btn": gr.Button(interactive=hub.ready),
            "stop_btn": gr.Button(interactive=False)}


def stop_compare(values: dict) -> dict:
    if not RUNS.stop(values["run_id"]):
        return {}
    return {"status": render_banner("Stopping every decoder…", "info")}


# ----------------------------------------------------------------------------- the result's words


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n else "none"


def render_table(cmp: Comparison) -> str:
    """One row per decoder. The predicted column is rebuilt from the row's own figures:
    tokens/step x vanilla's ms/step / (drafting + verify ms/step), the same means
    gumiho.lab.speedmodel divides (vanilla's ms/step is its plain forward)."""
    rows = []
    v = cmp.vanilla
    vt = step_time(v)
    # Vanilla writes one token a step; its step is the plain forward, shown as verify time.
    rows.append(_row("Vanilla", "", v.stats().tau, v.stats().tokens_per_s, None, 1.0 if vt else None, None, None,
                     vt.total_ms if vt else None, "reference"))
    for c in cmp.drafters:
        st, t, sp, p = c.stats, step_time(c.record), cmp.speedup(c), cmp.prediction(c)
        same = "identical" if c.same_as_vanilla else ("stopped" if c.record.stopped else "DIFFERS")
        rows.append(_row(SHORT.get(c.method, c.label), _millions(c.parameters), st.tau, st.tokens_per_s, sp,
                         p.tau if p is not None else None, p.speedup if p is not None else None,
                         t.draft_ms if t else None, t.verify_ms if t else None, same))
    for s in cmp.skipped:
        rows.append(f'<tr><td>{esc(SHORT.get(s.method, s.label))}</td><td colspan="9" class="no">not run: '
                    f'{esc(s.reason)}</td></tr>')
    head = ("<tr><th>Decoder</th><th>Drafter size</th>"
            '<th title="new tokens / target forwards, the prefill counted">tau</th><th>tokens/s</th><th>speedup</th>'
            '<th title="1 + sum of acceptance by position: the tokens a verify step writes, on average">'
            "tokens/step</th>"
            '<th title="tokens/step × vanilla\'s ms/step / (drafting + verify ms/step), every time the mean per step">'
            "predicted</th><th>drafting ms/step</th><th>verify ms/step</th><th>text vs vanilla</th></tr>")
    return f'<table class="walk-table gm-cmp-table">{head}{"".join(rows)}</table>'


def _ms(x: Optional[float]) -> str:
    """Milliseconds to about three figures or more, so that the predicted column can be
    redone from the row to its two decimals."""
    if x is None:
        return "–"
    return format(x, ".1f" if x >= 10 else ".2f" if x >= 1 else ".3f")


def _row(name: str, size: str, tau: float, tps: float, speedup: Optional[float], per_step: Optional[float],
         predicted: Optional[float], draft_ms: Optional[float], verify_ms: Optional[float], same: str) -> str:
    def times(x):
        return "–" if x is None else f"{x:.2f}x"

    cls = "ok" if same in ("identical", "reference") else "no"
    return (f"<tr><td>{esc(name)}</td><td>{esc(size)}</td><td>{tau:.2f}</td><td>{tps:.1f}</td>"
            f"<td>{times(speedup)}</td><td>{'–' if per_step is None else format(per_step, '.3f')}</td>"
            f"<td>{times(predicted)}</td><td>{_ms(draft_ms)}</td>"
            f"<td>{_ms(verify_ms)}</td><td class=\"{cls}\">{esc(same)}</td></tr>")


def render_findings(cmp: Comparison) -> str:
    items = "".join(f"<li>{esc(s)}</li>" for s in findings(cmp))
    return f'<div class="gm-cmp-findings"><ul>{items}</ul></div>'


def render_text(cmp: Comparison) -> str:
    words = "The answer (every decoder's, token for token)" if all(c.same_as_vanilla for c in cmp.drafters) \
        else "Vanilla's answer"
    return (f'<div class="gm-col-title">{esc(words)}</div>'
            f'<div class="gm-tokens gm-cmp-answer">{esc(cmp.vanilla.text)}</div>')
