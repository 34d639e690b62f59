"""The Lossless? tab: one prompt sampled many times by vanilla decoding and by
speculative decoding, the two samples side by side and a chi-square test of whether
they come from one distribution; a wrong acceptance rule shows the test failing."""
from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from gumiho.lab.rules import EXACT

from ..core.forms import MAX_TEMPERATURE
from ..core.jobs import RUNS, Control, run_job
from ..core.page import GENERATE, fail, job_outputs, placeholder, wire
from ..models.hub import ModelHub
from ..replays import Replays, shown_as_recorded
from ..views.render import esc, machine_busy_note, render_banner
from .figures import samples_figure
from .run import (
    MAX_SAMPLES,
    MAX_TOKENS,
    MIN_TOKENS,
    RULE_LABELS,
    LosslessForm,
    LosslessProgress,
    compute_lossless,
    parse_lossless,
)
from .summary import ALPHA, lossless_summary

INTRO = ("**Is speculative sampling really lossless?** Above temperature 0 the two columns of a race write "
         "different texts, as two samples would, so the texts cannot show it. This experiment can: it samples the "
         "first tokens of one answer many times with the target alone (vanilla) and many times with the Gumiho "
         "drafter and the acceptance test, and tests whether the two samples come from one distribution "
         "(chi-square test of homogeneity). With the engine's rule they should; pick a **wrong rule** and watch "
         "them drift apart. The test needs at least 2 first tokens: the first token is the target's own, written by "
         "the prompt's prefill before anything is drafted, so both ways draw it alike and only from the second token "
         "on can a rule show. 200 samples of 2 tokens take about a minute on two quiet CPU cores.")

EXPLAIN = f"""
**How to read it.** Each pair of bars is one sequence of first tokens: the share of the vanilla samples that
wrote it, and the share of the speculative ones. The *p-value* is the chance of two samples at least this
different if both came from one distribution: above {ALPHA:g}, nothing shows a difference; below, the two
differ (a correct rule still falls below it about once in a hundred runs: try another seed). Sequences
expected fewer than 5 times are pooled into one cell of the test.

**The rules.** *The engine's*: a drafted token is kept with probability min(1, p/q), and because the tree's
tokens are picked top-k, not sampled, q = 1: kept with probability p; a rejected token is taken out of p before
the next is tried, and the last token is drawn from what is left. *Keep every drafted token*: the drafter, not
the target, writes the text. *min(1, p/q) with the drafter's own q*: the rule for tokens *sampled* from q,
applied to tokens that were not: a token the drafter gave q = 0.3 and the target p = 0.3 is kept every time
instead of three times in ten.
"""


@dataclass
class LosslessTab:
    run_btn: gr.Button  # enabled by the status poll once the model is ready


def add_lossless_tab(hub: ModelHub, examples: list[str], ready: bool, replays: Replays) -> LosslessTab:
    with gr.Tab("Lossless?", id="lossless"):
        gr.Markdown(INTRO)
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(label="Prompt", lines=2, max_lines=6, scale=5, value=examples[0],
                                elem_id="gm-ll-prompt")
            with gr.Column(scale=1, min_width=170):
                run_btn = gr.Button("Run the experiment", variant="primary", interactive=ready, elem_id="gm-ll-run")
                stop_btn = gr.Button("Stop", variant="stop", interactive=False, elem_id="gm-ll-stop")
                live_btn = gr.Button("Run it live", visible=False, size="sm", elem_id="gm-ll-live")
        with gr.Row():
            temperature = gr.Slider(0.05, MAX_TEMPERATURE, value=0.8, step=0.05, label="Temperature", min_width=200)
            samples = gr.Slider(10, MAX_SAMPLES, value=200, step=10, label="Samples of each", min_width=200)
            tokens = gr.Slider(MIN_TOKENS, MAX_TOKENS, value=2, step=1, label="First tokens", min_width=160,
                               info="2 at least: the first is the target's own")
            seed = gr.Number(0, precision=0, label="Seed", min_width=120)
        rule = gr.Radio([(label, name) for name, label in RULE_LABELS.items()], value=EXACT, label="Acceptance rule",
                        elem_id="gm-ll-rule")
        status = gr.HTML("", elem_id="gm-ll-status")
        verdict = gr.HTML(placeholder("The test's result appears here."), elem_id="gm-ll-verdict")
        plot = gr.Plot(samples_figure(None), label="Both samples", show_label=False, elem_id="gm-ll-plot")
        gr.Markdown(EXPLAIN)
        run_id = gr.State("")
        request = gr.State(None)

    controls = {"prompt": prompt, "temperature": temperature, "samples": samples, "tokens": tokens, "rule": rule,
                "seed": seed}
    buttons = {"run_btn": run_btn, "stop_btn": stop_btn, "live_btn": live_btn}
    shown = {"status": status, "verdict": verdict, "plot": plot, "live_btn": live_btn}
    hidden = dict(show_progress="hidden", api_visibility="private")
    # An example at the starting settings is answered from its recording (app/replays); Run it live
    # samples again here and now.
    for button, live in ((run_btn, False), (live_btn, True)):
        started = wire(button.click, start_lossless, controls, {"run_id": run_id, "request": request, **buttons,
                                                                **shown}, concurrency_limit=None, **hidden)
        computed = wire(started.then, lossless_compute, {"run_id": run_id, "request": request}, shown, hub, replays,
                        live, concurrency_id=GENERATE, concurrency_limit=None, **hidden)
        wire(computed.then, end_lossless, {"run_id": run_id}, buttons, hub, queue=False, **hidden)
    wire(stop_btn.click, stop_lossless, {"run_id": run_id}, {"status": status}, queue=False, **hidden)
    return LosslessTab(run_btn)


def start_lossless(values: dict) -> dict:
    try:
        req = parse_lossless(LosslessForm(**{f.name: values[f.name] for f in fields(LosslessForm)}))
    except Exception as e:
        return {"run_id": "", "request": None, "run_btn": gr.Button(interactive=False), "status": fail(e)}
    return {"run_id": RUNS.new(), "request": req, "run_btn": gr.Button(interactive=False),
            "stop_btn": gr.Button(interactive=True), "live_btn": gr.Button(visible=False), "verdict": "",
            "plot": samples_figure(None),
            "status": render_banner("Waiting for a free slot (one generation runs at a time)…", "info")}


async def lossless_compute(hub: ModelHub, replays: Replays, live: bool, values: dict):
    req = values["request"]
    if req is None:  # refused by start_lossless, which said why
        yield {}
        return
    ctl = RUNS.get(values["run_id"]) or Control()
    progress = LosslessProgress()
    updates = run_job(hub, replays, "lossless", req, lambda stop: compute_lossless(hub, req, stop, progress), live=live,
                      stop=ctl.stop, progress=progress)
    try:
        async for out in job_outputs(updates, lossless_outputs, lambda result, recorded_on: shown_as_recorded(
                lossless_outputs(result), recorded_on, "losslessness check"), progress.text):
            yield out
    except Exception as e:  # every failure becomes a message; the app keeps serving
        yield {"status": fail(e)}


def lossless_outputs(result) -> dict:
    answer = lossless_summary(result)
    differ = answer["p_value"] < ALPHA
    done = (f"{answer['samples']} samples of each, {answer['seconds']:.0f} s"
            + (" (stopped early: the test covers what was drawn)" if answer["stopped"] else ""))
    verdict = (f'<div class="gm-ll-verdict {"differ" if differ else "same"}" data-p="{answer["p_value"]:.6g}">'
               f'<b>{esc(result.check.headline(ALPHA))}</b> '
               f"chi² = {answer['chi2']:.2f}, {answer['dof']} degree{'' if answer['dof'] == 1 else 's'} of freedom, "
               f"p = {answer['p_value']:.3g} "
               f"({answer['sequences']} distinct sequences; {answer['pooled']} rare ones pooled). "
               f"{esc(result.check.reading(ALPHA))}</div>")
    # A busy machine stretches the check's time, never its verdict (no figure of the test is a time).
    busy = machine_busy_note(getattr(result, "machine", None), "this check's time is no guide to a quiet "
                                                                "machine's; its verdict does not depend on the clock. "
                                                                "Time it again")
    return {"status": render_banner(done, "info" if answer["stopped"] else "ready")
            + (render_banner(busy, "warn") if busy else ""), "verdict": verdict, "plot": samples_figure(result)}


def end_lossless(hub: ModelHub, values: dict) -> dict:
    RUNS.end(values["run_id"])
    return {"run_btn": gr.Button(interactive=hub.ready), "stop_btn": gr.Button(interactive=False)}


def stop_lossless(values: dict) -> dict:
    if not RUNS.stop(values["run_id"]):
        return {}
    return {"status": render_banner("Stopping after the current sample…", "info")}
