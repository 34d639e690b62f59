"""What if? The speedup predicted from acceptance and cost (gumiho.lab.speedmodel), with
sliders a class can move: acceptance at draft positions 1-7, and what a verify step
and drafting cost in plain forwards. It shows why a verify costing 2.5 forwards (the
4-bit runtime on a CPU) loses whatever the drafter, and what acceptance a cost needs.
"Use the last race's figures" fills the sliders from the visitor's own race."""
from __future__ import annotations

import math
from dataclasses import dataclass

import gradio as gr

from gumiho.lab.speedmodel import predicted_speedup_from_ratios, predicted_tau

from ..core.page import wire
from ..views.render import esc
from ..views.sliders import FigureSlider

POSITIONS = 7
# A start that tells a story: acceptance falling with the position, as every drafter's does,
# and a verify that costs what one forward does (float32 on this CPU, or a GPU).
START_ACCEPTANCE = (0.75, 0.5, 0.32, 0.2, 0.12, 0.07, 0.04)
START_VERIFY, START_DRAFT = 1.0, 0.2

# The sliders' tracks. A race can produce any positive cost (the paper's 71-node tree on
# the 4-bit weights verifies in many forwards' time), so no track holds every figure: a
# race's figure beyond one widens it (:func:`from_race`), and a figure typed beyond one
# is used as typed and said so (app.views.sliders.FigureSlider, :func:`predicted`).
VERIFY_RANGE = (0.1, 10.0)
DRAFT_RANGE = (0.0, 5.0)

INTRO = ("Move the sliders: acceptance at each draft position (the share of verify steps whose accepted length "
         "reaches it) and what a verify step and the drafting cost, counted in plain forwards. Predicted speedup "
         "= (1 + a1 + … + a7) / (verify + drafting).")


@dataclass
class WhatIf:
    acceptance: list  # the POSITIONS sliders
    verify: gr.Slider
    draft: gr.Slider
    fill_btn: gr.Button
    result: gr.HTML


def monotone(acceptance) -> tuple[list[float], bool]:
    """Acceptance as it can be: a path that reaches position d reached d-1, so a_d is
    at most a_(d-1). Returns the values clipped so, and whether any was."""
    out, clipped, ceiling = [], False, 1.0
    for a in acceptance:
        a = min(max(float(a), 0.0), 1.0)
        if a > ceiling:
            a, clipped = ceiling, True
        out.append(a)
        ceiling = a
    return out, clipped


USUAL_TRACKS = {"verify": VERIFY_RANGE, "draft": DRAFT_RANGE}


def _beyond(name: str, x: float, track) -> str:
    """A sentence when ``x`` lies beyond the slider's track ("" when on it)."""
    lo, hi = track
    if lo <= x <= hi:
        return ""
    return f" {name} {x:g} lies beyond its slider's track ({lo:g} to {hi:g}): predicted with it as given."


def predicted(values: dict) -> dict:
    """The sliders' prediction as HTML (on every slider move). ``values["tracks"]``:
    each cost slider's (minimum, maximum) now, as :func:`from_race` may have widened
    them (absent: the usual ones)."""
    tracks = values.get("tracks") or USUAL_TRACKS
    try:
        raw = [float(values[f"a{d}"]) for d in range(1, POSITIONS + 1)]
        verify, draft = float(values["verify"]), float(values["draft"])
        if not all(math.isfinite(x) for x in raw + [verify, draft]):
            raise ValueError
    except (TypeError, ValueError, KeyError):  # a value no slider gives (sent by hand): a message, not a traceback
        return {"result": '<div class="gm-whatif">Give numbers: acceptance from 0 to 1, costs above 0.</div>'}
    if not verify > 0 or draft < 0:
        return {"result": '<div class="gm-whatif">A verify step costs more than 0 forwards, and drafting 0 or more: '
                          f"got verify {verify:g} and drafting {draft:g}.</div>"}
    acceptance, clipped = monotone(raw)
    speedup = predicted_speedup_from_ratios(acceptance, verify, draft)
    tau = predicted_tau(acceptance)
    need = verify + draft - 1  # the sum of acceptance at which drafting breaks even
    word = "faster" if speedup >= 1 else "slower"
    note = ""
    if any(not 0 <= a <= 1 for a in raw):
        note += " Acceptance is a share of verify steps, from 0 to 1: a value outside counts as the nearer end."
    if clipped:
        note += (" Acceptance cannot rise with the position (a path that reaches a position reached the one "
                 "before), so a value above the one before it counts as that one.")
    note += _beyond("Verify", verify, tracks["verify"]) + _beyond("Drafting", draft, tracks["draft"])
    note += values.get("widened", "")
    return {"result": (f'<div class="gm-whatif {"win" if speedup >= 1 else "lose"}" data-speedup="{speedup:.4f}">'
                       f"<b>Predicted speedup {speedup:.2f}×</b> ({word} than vanilla): {tau:.2f} tokens per verify "
                       f"step / {verify + draft:.2f} forwards of cost. Drafting pays once the acceptance bars sum to "
                       f"more than {max(need, 0):.2f}.{esc(note)}</div>")}


def _track(x: float, usual: tuple[float, float]) -> tuple[float, float]:
    """The usual track, widened to whole numbers (its low end to hundredths) to hold ``x``."""
    lo, hi = usual
    return min(lo, math.floor(x * 100) / 100), max(hi, float(math.ceil(x)))


def from_race(values: dict) -> dict:
    """The sliders set to the visitor's last race: its acceptance by position and its
    verify and drafting times over its vanilla lane's plain forward (the same means the
    race's own prediction divides), each to the hundredth, the sliders' step. A cost
    beyond its slider's usual track widens the track to hold it (Gradio then accepts
    the figure on that slider), and the result says so."""
    race = values["race"]
    p = race.prediction if race is not None else None
    if p is None or p.forward_s <= 0:
        return {"result": '<div class="gm-whatif">Run a race first: its figures fill the sliders.</div>'}
    acc = [round(a, 2) for a in list(p.acceptance[:POSITIONS]) + [0.0] * max(0, POSITIONS - len(p.acceptance))]
    figures = {**{f"a{d + 1}": acc[d] for d in range(POSITIONS)},
               "verify": round(p.verify_s / p.forward_s, 2), "draft": round(p.draft_s / p.forward_s, 2)}
    tracks = {name: _track(figures[name], USUAL_TRACKS[name]) for name in USUAL_TRACKS}
    widened = [f"{'verify' if name == 'verify' else 'drafting'} cost {figures[name]:g} forwards (its track now "
               f"{tracks[name][0]:g} to {tracks[name][1]:g})" for name in tracks if tracks[name] != USUAL_TRACKS[name]]
    out = {f"a{d + 1}": gr.Slider(value=acc[d]) for d in range(POSITIONS)}
    out.update({name: gr.Slider(value=figures[name], minimum=tracks[name][0], maximum=tracks[name][1])
                for name in tracks})
    note = f" This race's {' and '.join(widened)} lay beyond the usual track: widened to hold it." if widened else ""
    out["tracks"] = tracks
    out.update(predicted({**figures, "tracks": tracks, "widened": note}))
    return out


def add_whatif(race_state: gr.State) -> WhatIf:
    with gr.Accordion("What if? The speedup predicted from acceptance and cost", open=False):
        gr.Markdown(INTRO)
        with gr.Row():
            sliders = [FigureSlider(0.0, 1.0, value=START_ACCEPTANCE[d], step=0.01, label=f"a{d + 1}", min_width=110,
                                    elem_id=f"gm-whatif-a{d + 1}") for d in range(POSITIONS)]
        with gr.Row():
            verify = FigureSlider(*VERIFY_RANGE, value=START_VERIFY, step=0.01, label="verify step, in plain forwards",
                                  elem_id="gm-whatif-verify", min_width=220)
            draft = FigureSlider(*DRAFT_RANGE, value=START_DRAFT, step=0.01, label="drafting, in plain forwards",
                                 elem_id="gm-whatif-draft", min_width=220)
            fill_btn = gr.Button("Use the last race's figures", size="sm", elem_id="gm-whatif-fill", min_width=200)
        start = {f"a{d + 1}": START_ACCEPTANCE[d] for d in range(POSITIONS)}
        result = gr.HTML(predicted({**start, "verify": START_VERIFY, "draft": START_DRAFT})["result"],
                         elem_id="gm-whatif-result")
        tracks = gr.State(None)  # the cost sliders' tracks, once a race's figures widened them
    inputs = {**{f"a{d + 1}": s for d, s in enumerate(sliders)}, "verify": verify, "draft": draft}
    quiet = dict(queue=False, show_progress="hidden", api_visibility="private")
    for control in inputs.values():
        wire(control.change, predicted, {**inputs, "tracks": tracks}, {"result": result}, **quiet)
    wire(fill_btn.click, from_race, {"race": race_state}, {**inputs, "tracks": tracks, "result": result}, **quiet)
    return WhatIf(sliders, verify, draft, fill_btn, result)
