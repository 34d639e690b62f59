"""The plotly figures of a run: acceptance by draft position (unconditional and
conditional, labelled), the accepted-length histogram and tokens/s over time for
both columns. The draft tree of one verify step (the walkthrough's) is
app/walkthrough/treeplot.py, on the same :class:`Figure`.

Each figure is built directly as the JSON that plotly.js draws (``data`` traces
and a ``layout``), held in :class:`Figure`. Building plotly's validated graph
objects costs about 70 ms a figure on a busy CPU, a few hundred times more than
this; the race redraws its figures live while other visitors' runs are being
timed on the same cores, so the cheap form matters."""
from __future__ import annotations

import json
from typing import Optional, Sequence

from gumiho import GenerationStats
from gumiho.heads import HeadFamily

from . import palette
from .plotroom import last_position
from .records import DrafterLayout

_FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12, "color": "#2a3f5f"}
_AXIS = {"gridcolor": "#e8e8e8", "zerolinecolor": "#d0d0d0", "linecolor": "#bbb", "automargin": True}


class Figure(dict):
    """A plotly figure as its JSON spec: ``{"data": [...], "layout": {...}}``.
    ``gr.Plot`` accepts it like a plotly figure (it calls ``to_json``)."""

    @property
    def data(self) -> list:
        return self["data"]

    @property
    def layout(self) -> dict:
        return self["layout"]

    def trace(self, name: str) -> dict:
        return next(t for t in self["data"] if t.get("name") == name)

    def to_json(self) -> str:
        return json.dumps(self, ensure_ascii=False, allow_nan=False)


def _figure(title: str, height: int = 300, xaxis: Optional[dict] = None, yaxis: Optional[dict] = None) -> Figure:
    layout = {
        "title": {"text": title, "x": 0.02, "font": {"size": 14}},
        "height": height, "margin": {"l": 55, "r": 20, "t": 50, "b": 45}, "font": _FONT,
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "yanchor": "top", "xanchor": "left", "x": 0.0, "font": {"size": 11}},
        "xaxis": {**_AXIS, **(xaxis or {})}, "yaxis": {**_AXIS, **(yaxis or {})},
        "annotations": [], "shapes": [],
    }
    return Figure(data=[], layout=layout)


LEGEND_GAP_PX = 88  # from the plot's bottom edge to the legend: below the ticks and the axis title
LEGEND_ROOM_PX = 60  # three rows of entries (a narrow plot stacks them)


def _legend_below(fig: Figure) -> None:
    """The legend under the x axis's title, left-aligned. Above the plot, a legend of
    three long entries wraps onto the title. Plotly places a legend in fractions of
    the plot's height, so the gap in pixels is turned into one."""
    margin = fig.layout["margin"]
    margin["b"] = LEGEND_GAP_PX + LEGEND_ROOM_PX
    plot_px = fig.layout["height"] - margin["t"] - margin["b"]
    fig.layout["legend"]["y"] = round(-LEGEND_GAP_PX / plot_px, 4)


def _note(fig: Figure, text: str, y: float = 0.5) -> None:
    fig.layout["annotations"].append({"text": text, "x": 0.5, "y": y, "xref": "paper", "yref": "paper",
                                      "showarrow": False, "font": {"size": 13, "color": "#888"}})


def _layout_or_default(layout: Optional[DrafterLayout]) -> DrafterLayout:
    return layout or DrafterLayout()


def _position_colour(d: int, lay: DrafterLayout) -> str:
    """A draft position's colour: its drafter head's shade, or the copy proposer's
    green beyond the drafter's last position (only copied tokens reach there)."""
    if d > lay.max_depth:
        return palette.COPY_PLOT
    return palette.position_colour(d, lay.serial_positions, lay.max_depth)


def acceptance_figure(stats: Optional[GenerationStats], layout: Optional[DrafterLayout]) -> Figure:
    """Bars: unconditional acceptance at position d = share of verify steps whose
    accepted draft length is >= d. Line: conditional acceptance = that share
    divided by the share at d-1 (how often position d is right when everything
    before it was). With copying on, each bar is split: the part whose accepted
    token at d a drafter head proposed (its shade) under the part copied from the
    context (green), so a copied token is never credited to an MLP head. Positions
    the run's tree did not let the heads draft are a grey band, labelled so: their
    zeros say nothing of the heads."""
    lay = _layout_or_default(layout)
    steps = stats.verify_steps if stats is not None else 0
    depth = lay.depth
    unc = stats.acceptance_by_position(depth) if steps else [0.0] * depth
    cond = stats.conditional_acceptance_by_position(depth) if steps else [0.0] * depth
    copied = stats.copied_acceptance_by_position(depth) if steps else [0.0] * depth
    # The axis ends where the heads end; only a copied guess accepted beyond them extends it.
    depth = last_position(lay.max_depth, [unc])
    xs = list(range(1, depth + 1))
    unc, cond, copied = unc[:depth], cond[:depth], copied[:depth]
    fig = _figure(f"Acceptance by draft position ({steps} verify steps)", height=400,
                  xaxis={"title": {"text": "draft position d"}, "tickmode": "linear", "dtick": 1,
                         "range": [0.4, depth + 0.6]},
                  yaxis={"title": {"text": "acceptance"}, "range": [0, 1.12]})
    _legend_below(fig)
    skipped = set(lay.not_drafted())
    colours = [palette.REJECTED_PLOT if d in skipped else _position_colour(d, lay) for d in xs]
    if any(copied):
        fig.layout["barmode"] = "stack"
        drafter_part = [max(a - c, 0.0) for a, c in zip(unc, copied)]
        fig.data.append({"type": "bar", "x": xs, "y": [round(a, 4) for a in drafter_part],
                         "name": "unconditional, drafter's heads", "marker": {"color": colours},
                         "hovertemplate": "position %{x}<br>drafter's heads %{y:.2f}<extra></extra>"})
        fig.data.append({"type": "bar", "x": xs, "y": [round(c, 4) for c in copied],
                         "name": "unconditional, copied from the context",
                         "marker": {"color": palette.COPY_PLOT},
                         "hovertemplate": "position %{x}<br>copied %{y:.2f}<extra></extra>"})
    else:
        fig.data.append({"type": "bar", "x": xs, "y": [round(a, 4) for a in unc],
                         "name": "unconditional: P(accepted length ≥ d)", "marker": {"color": colours},
                         "hovertemplate": "position %{x}<br>unconditional %{y:.2f}<extra></extra>"})
    # No line where nothing was drafted or nothing was verified: a zero there would read as a measured one.
    line = [None if not steps or (d in skipped and not a) else round(c, 4) for d, c, a in zip(xs, cond, unc)]
    fig.data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": line,
                     "name": "conditional: P(d accepted | d−1 accepted)",
                     "line": {"color": "#333", "width": 2}, "marker": {"size": 7, "color": "#333"},
                     "hovertemplate": "position %{x}<br>conditional %{y:.2f}<extra></extra>"})
    _family_labels(fig, lay)
    _not_drafted_band(fig, lay)
    if not steps:
        _note(fig, "no verify steps yet", NOTE_OVER_BAND if skipped else 0.5)
    return fig


def _family_labels(fig: Figure, lay: DrafterLayout) -> None:
    """The families' names over their drafted positions, a dotted line between them."""
    s, drafted = lay.serial_positions, lay.drafted_depth
    spans = [((1 + min(s, drafted)) / 2, lay.label_of(HeadFamily.SERIAL), HeadFamily.SERIAL)] if s else []
    if drafted > s:
        spans.append(((s + 1 + drafted) / 2, lay.label_of(HeadFamily.MLP) if drafted - s > 1 else "MLP head 1", HeadFamily.MLP))
        if s:
            fig.layout["shapes"].append({"type": "line", "x0": s + 0.5, "x1": s + 0.5, "y0": 0, "y1": 1,
                                         "yref": "paper", "line": {"color": "#999", "dash": "dot"}})
    both = len(spans) == 2
    for x, text, head in spans:
        # Where both families show, each name sits against the dotted line between them,
        # the serial one to its left and the MLP one to its right: from the left end of
        # its positions, the serial name ran into the MLP one on a plot 450 px wide (the
        # page at 1024 px). Alone, a name runs rightwards from the left end of its
        # positions: centred on one position, a name wider than it ran over the y axis's
        # labels.
        if both:
            at, anchor = s + 0.5, ("right", -4) if head == HeadFamily.SERIAL else ("left", 4)
        else:
            at, anchor = x - (min(s, drafted) if head == HeadFamily.SERIAL else drafted - s) / 2, ("left", 0)
        # Above the plot area (paper coordinates), not at a data height: a conditional
        # acceptance of 1.0 draws its marker at the top of the data range, and on a page
        # that gives the plot less height a label inside the range sat on it.
        fig.layout["annotations"].append({"x": at, "y": 1, "yref": "paper", "yanchor": "bottom", "yshift": 2,
                                          "text": text, "showarrow": False, "xanchor": anchor[0],
                                          "xshift": anchor[1], "font": {"size": 11,
                                                                        "color": palette.plot_colour(head, 0, 1)}})


def _not_drafted_band(fig: Figure, lay: DrafterLayout, x_shift: float = 0.0) -> None:
    """A grey band over the drafter's positions the run's tree did not draft, saying so."""
    skipped = lay.not_drafted()
    if not skipped:
        return
    x0, x1 = skipped[0] - 0.5 + x_shift, skipped[-1] + 0.5 + x_shift
    fig.layout["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0,
                                 "y1": 1, "layer": "below", "line": {"width": 0}, "fillcolor": NOT_DRAFTED_FILL})
    fig.layout["annotations"].append({"x": (x0 + x1) / 2, "y": BAND_LABEL_Y, "xref": "x", "yref": "paper",
                                      "text": f"{'heads: ' if lay.copy else ''}not drafted<br>"
                                              f"(tree depth {lay.drafted_depth})",
                                      "showarrow": False, "font": {"size": 11, "color": "#777"}})


NOT_DRAFTED_FILL = "#efefef"
# Heights (fractions of the plot) of the band's label and of an empty plot's note
# over it: apart, so that neither is drawn over the other.
BAND_LABEL_Y, NOTE_OVER_BAND = 0.4, 0.78


def accepted_length_figure(stats: Optional[GenerationStats], layout: Optional[DrafterLayout]) -> Figure:
    """How many drafted tokens each verify step kept (the bonus token not counted)."""
    lay = _layout_or_default(layout)
    hist = list(stats.accepted_hist) if stats is not None else []
    depth = last_position(lay.max_depth, [hist], start=0)  # the heads' last position, or a longer copied run
    xs = list(range(0, depth + 1))
    ys = (hist + [0] * (depth + 1))[:depth + 1]
    total = sum(ys)
    mean = sum(k * c for k, c in enumerate(ys)) / total if total else 0.0
    fig = _figure(f"Accepted length per verify step (mean {mean:.2f})", height=400,
                  xaxis={"title": {"text": "drafted tokens accepted in one verify step"}, "tickmode": "linear",
                         "dtick": 1, "range": [-0.6, depth + 0.6]},
                  yaxis={"title": {"text": "verify steps"}, "rangemode": "tozero"})
    colours = [palette.NEUTRAL_PLOT] + [_position_colour(d, lay) for d in xs[1:]]
    fig.data.append({"type": "bar", "x": xs, "y": ys, "name": "verify steps", "marker": {"color": colours},
                     "hovertemplate": "%{y} steps accepted %{x} drafted tokens<extra></extra>"})
    fig.layout["showlegend"] = False  # one trace: its name is the y axis's title
    if not lay.copy:  # copied runs can be longer than the tree: then every length is possible
        _not_drafted_band(fig, lay)
    if not total:
        _note(fig, "no verify steps yet", NOTE_OVER_BAND if lay.not_drafted() and not lay.copy else 0.5)
    return fig


def _rate_points(series: Sequence[tuple[float, int]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for t, n in series:
        if t > 0:
            xs.append(round(t, 4))
            ys.append(round(n / t, 3))
    return xs, ys


def speed_figure(vanilla: Sequence[tuple[float, int]], gumiho: Sequence[tuple[float, int]],
                 t_max: Optional[float] = None) -> Figure:
    """Tokens/s so far (tokens emitted / seconds since the run started) for both
    columns, against each run's own clock."""
    xaxis = {"title": {"text": "seconds since the run started"}, "rangemode": "tozero"}
    if t_max:
        xaxis["range"] = [0, round(t_max * 1.03, 3)]
    fig = _figure("Tokens per second over time", height=360, xaxis=xaxis,
                  yaxis={"title": {"text": "tokens/s so far"}, "rangemode": "tozero"})
    _legend_below(fig)
    for name, series, colour in (("vanilla", vanilla, palette.VANILLA_LINE), ("Gumiho", gumiho, palette.GUMIHO_LINE)):
        xs, ys = _rate_points(series)
        fig.data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys, "name": name,
                         "line": {"color": colour, "width": 2, "shape": "hv"}, "marker": {"size": 4},
                         "hovertemplate": f"{name}<br>%{{x:.2f}} s: %{{y:.1f}} tokens/s<extra></extra>"})
    if not vanilla and not gumiho:
        _note(fig, "run a race to see the speeds")
    return fig
