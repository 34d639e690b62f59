"""The race's replay: both columns drawn side by side with the timestamps their own
decoders' clocks gave each step, after the race was timed (app/race/run.py) or from a
recording or a shared link (app/replays). Nothing is decoded while it is drawn."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from ..core.jobs import RUNS, Control
from ..core.page import fail
from ..views.records import RaceResult
from ..views.render import render_banner, render_result, render_run, render_stats
from .plots import RACE_PLOTS, PlotFrame


@dataclass
class Frame:
    clock: float
    n_vanilla: int
    n_gumiho: int
    final: bool
    plots: bool  # time to redraw the figures
    stopped: bool = False


def replay_frames(result: RaceResult, stop: threading.Event, fps: float = 12.0, plot_period: float = 0.5,
                  sleep=time.sleep, now=time.perf_counter) -> Iterator[Frame]:
    """Frames of the side-by-side replay: at wall time t after its start, each
    column shows the steps its own decoder's clock had finished by t. ``stop`` set during
    the replay ends it where it is.

    A race stopped while it was being timed (or whose Stop came just as its timing
    ended: ``stop`` is already set) is not replayed: one final frame shows all that
    was produced until then, since the Stop was meant for the decoding, not for
    hiding its result."""
    duration = result.duration
    if stop.is_set() or result.vanilla.stopped or result.gumiho.stopped:
        yield Frame(duration, len(result.vanilla.events), len(result.gumiho.events), final=True, plots=True)
        return
    times = sorted({ev.elapsed_s for run in (result.vanilla, result.gumiho) for ev in run.events})
    start = now()
    last_plot, plotted = -1e9, None
    while True:
        t = now() - start
        stopped = stop.is_set()
        final = stopped or t >= duration
        clock = min(t, duration)
        counts = (result.vanilla.steps_until(clock), result.gumiho.steps_until(clock))
        # Figures are redrawn at most every plot_period, and only when something changed.
        plots = final or ((t - last_plot) >= plot_period and counts != plotted)
        if plots:
            last_plot, plotted = t, counts
        yield Frame(clock, counts[0], counts[1], final, plots, stopped and t < duration)
        if final:
            return
        nxt = next((x for x in times if x > t), duration)
        sleep(max(0.0, min(1.0 / fps, nxt - t)) or 0.001)


def race_replay(values: dict):
    result: Optional[RaceResult] = values["race"]
    if result is None:  # no race to replay (refused, failed or stopped early): every output stays
        yield {}
        return
    ctl = RUNS.get(values["run_id"]) or Control()
    g_note = result.notes[0] if result.notes else ""
    if result.drafter_note:
        g_note += " — " + result.drafter_note
    v, g = result.vanilla, result.gumiho
    if v.stopped and not g.events:
        g_note = "Not run: stopped before Gumiho's turn."
    try:
        yield from _replay(result, ctl, g_note)
    except Exception as e:  # the steps after this one still run and restore the buttons
        yield {"status": fail(e)}


def _replay(result: RaceResult, ctl: Control, g_note: str):
    v, g = result.vanilla, result.gumiho
    for fr in replay_frames(result, ctl.stop):
        if fr.stopped:
            end = render_stopped(fr.clock)
        else:
            end = render_result(result) if fr.final else ""
        out = {"v_html": render_run(v, fr.n_vanilla), "g_html": render_run(g, fr.n_gumiho, ctl.show_rejected),
               "v_stats": render_stats(v, fr.n_vanilla, fr.clock, _state_note(v, fr.n_vanilla, fr)),
               "g_stats": render_stats(g, fr.n_gumiho, fr.clock, g_note), "result_html": end}
        if fr.plots:
            frame = PlotFrame(result, fr.n_vanilla, fr.n_gumiho)
            out.update({plot.elem_id: plot.draw(frame) for plot in RACE_PLOTS})
        if fr.final:
            out["status"] = render_banner(_final_note(result, fr), "ready" if not fr.stopped else "info")
        else:
            out["status"] = render_banner(f"Replaying with the recorded timestamps: {fr.clock:.1f} s of "
                                          f"{result.duration:.1f} s", "info")
        yield out


# ----------------------------------------------------------------------------- the replay's words


def _state_note(run, n, frame) -> str:
    if frame.final and not frame.stopped:
        return f"finished ({run.finish_reason})" if run.finish_reason else ""
    return "done" if n >= len(run.events) and run.events else ""


def render_stopped(clock: float) -> str:
    return f'<div class="gm-result stopped">Replay stopped at {clock:.1f} s.</div>'


def _final_note(result: RaceResult, frame) -> str:
    if frame.stopped:
        return "Replay stopped."
    if result.vanilla.stopped and not result.gumiho.events:
        return "Stopped while vanilla decoding was timed: its column shows what it produced; Gumiho did not run."
    if result.vanilla.stopped or result.gumiho.stopped:
        return "Stopped: both columns show what was produced until then."
    return ("Done. Both decoders were timed in alternation, each on its own clock, and replayed with those "
            "timestamps. Toggle 'Show rejected drafts' to see what the drafter guessed and the target threw away.")
