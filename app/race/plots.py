"""The race's plots, in one table: each plot's element id, title and place on the
page, its figure before any race, and its figure at a frame of a race's replay.
The Race tab builds its plots from :data:`RACE_PLOTS`, the replay redraws every one
of them, and the browser test finds them by it: a new plot is one row here (and its
figure function in app/views/figures.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from ..views import figures
from ..views.records import DrafterLayout, RaceResult


@dataclass
class PlotFrame:
    """What the plots draw at one frame of a replay: the race, and how many steps of
    each decoder the frame has shown."""

    result: RaceResult
    n_vanilla: int
    n_gumiho: int

    @cached_property
    def gumiho_stats(self):  # the steps shown so far, summarised once for every plot of the frame
        return self.result.gumiho.stats(self.n_gumiho)


@dataclass(frozen=True)
class RacePlot:
    elem_id: str
    title: str
    row: int  # plots with the same row sit side by side, rows in order
    empty: Callable[[DrafterLayout], object] = field(compare=False)  # before any race (the legend's layout)
    draw: Callable[[PlotFrame], object] = field(compare=False)


RACE_PLOTS = (
    RacePlot("gm-acc-plot", "Acceptance by position", 0,
             lambda layout: figures.acceptance_figure(None, layout),
             lambda f: figures.acceptance_figure(f.gumiho_stats, f.result.gumiho.layout)),
    RacePlot("gm-hist-plot", "Accepted length", 0,
             lambda layout: figures.accepted_length_figure(None, layout),
             lambda f: figures.accepted_length_figure(f.gumiho_stats, f.result.gumiho.layout)),
    RacePlot("gm-speed-plot", "Speed", 1,
             lambda layout: figures.speed_figure([], []),
             lambda f: figures.speed_figure(f.result.vanilla.series(f.n_vanilla), f.result.gumiho.series(f.n_gumiho),
                                            f.result.duration)),
)
