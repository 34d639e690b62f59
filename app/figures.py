"""The plotly figures: acceptance by draft position (unconditional and
conditional, labelled), the accepted-length histogram, tokens/s over time for
both columns, and the draft tree of one verify step (for the walkthrough).

Each figure is built directly as the JSON that plotly.js draws (``data`` traces
and a ``layout``), held in :class:`Figure`. Building plotly's validated graph
objects costs about 70 ms a figure on a busy CPU, a few hundred times more than
this; the race redraws its figures live while other visitors' runs are being
timed on the same cores, so the cheap form matters."""
from __future__ import annotations

import json
from typing import Optional, Sequence

from gumiho import GenerationStats

from . import palette
from .render import esc_plot, visible
from .tokens import DrafterLayout

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
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        "xaxis": {**_AXIS, **(xaxis or {})}, "yaxis": {**_AXIS, **(yaxis or {})},
        "annotations": [], "shapes": [],
    }
    return Figure(data=[], layout=layout)


def _note(fig: Figure, text: str) -> None:
    fig.layout["annotations"].append({"text": text, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
                                      "showarrow": False, "font": {"size": 13, "color": "#888"}})


def _layout_or_default(layout: Optional[DrafterLayout]) -> DrafterLayout:
    return layout or DrafterLayout()


def acceptance_figure(stats: Optional[GenerationStats], layout: Optional[DrafterLayout]) -> Figure:
    """Bars: unconditional acceptance at position d = share of verify steps whose
    accepted draft length is >= d. Line: conditional acceptance = that share
    divided by the share at d-1 (how often position d is right when everything
    before it was)."""
    lay = _layout_or_default(layout)
    depth = lay.max_depth
    xs = list(range(1, depth + 1))
    steps = stats.verify_steps if stats is not None else 0
    unc = stats.acceptance_by_position(depth) if steps else [0.0] * depth
    cond = stats.conditional_acceptance_by_position(depth) if steps else [0.0] * depth
    fig = _figure(f"Acceptance by draft position ({steps} verify steps)",
                  xaxis={"title": {"text": "draft position d"}, "tickmode": "linear", "dtick": 1,
                         "range": [0.4, depth + 0.6]},
                  yaxis={"title": {"text": "acceptance"}, "range": [0, 1.12]})
    fig.data.append({"type": "bar", "x": xs, "y": [round(a, 4) for a in unc],
                     "name": "unconditional: P(accepted length ≥ d)",
                     "marker": {"color": [palette.position_colour(d, lay.serial_positions, depth) for d in xs]},
                     "hovertemplate": "position %{x}<br>unconditional %{y:.2f}<extra></extra>"})
    fig.data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": [round(c, 4) for c in cond],
                     "name": "conditional: P(d accepted | d−1 accepted)",
                     "line": {"color": "#333", "width": 2}, "marker": {"size": 7, "color": "#333"},
                     "hovertemplate": "position %{x}<br>conditional %{y:.2f}<extra></extra>"})
    s = lay.serial_positions
    if 0 < s < depth:
        fig.layout["shapes"].append({"type": "line", "x0": s + 0.5, "x1": s + 0.5, "y0": 0, "y1": 1, "yref": "paper",
                                     "line": {"color": "#999", "dash": "dot"}})
        for x, text, head in (((1 + s) / 2, "serial", "serial"), ((s + 1 + depth) / 2, "MLP heads", "mlp")):
            fig.layout["annotations"].append({"x": x, "y": 1.07, "text": text, "showarrow": False,
                                              "font": {"color": palette.plot_colour(head, 0, 1)}})
    if not steps:
        _note(fig, "no verify steps yet")
    return fig


def accepted_length_figure(stats: Optional[GenerationStats], layout: Optional[DrafterLayout]) -> Figure:
    """How many drafted tokens each verify step kept (the bonus token not counted)."""
    lay = _layout_or_default(layout)
    depth = lay.max_depth
    xs = list(range(0, depth + 1))
    hist = list(stats.accepted_hist) if stats is not None else []
    ys = (hist + [0] * (depth + 1))[:depth + 1]
    total = sum(ys)
    mean = sum(k * c for k, c in enumerate(ys)) / total if total else 0.0
    fig = _figure(f"Accepted length per verify step (mean {mean:.2f})",
                  xaxis={"title": {"text": "drafted tokens accepted in one verify step"}, "tickmode": "linear",
                         "dtick": 1, "range": [-0.6, depth + 0.6]},
                  yaxis={"title": {"text": "verify steps"}, "rangemode": "tozero"})
    colours = [palette.NEUTRAL_PLOT] + [palette.position_colour(d, lay.serial_positions, depth) for d in xs[1:]]
    fig.data.append({"type": "bar", "x": xs, "y": ys, "name": "verify steps", "marker": {"color": colours},
                     "hovertemplate": "%{y} steps accepted %{x} drafted tokens<extra></extra>"})
    if not total:
        _note(fig, "no verify steps yet")
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
    fig = _figure("Tokens per second over time", xaxis=xaxis,
                  yaxis={"title": {"text": "tokens/s so far"}, "rangemode": "tozero"})
    for name, series, colour in (("vanilla", vanilla, "#6b6b6b"), ("Gumiho", gumiho, palette.plot_colour("mlp", 0, 1))):
        xs, ys = _rate_points(series)
        fig.data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys, "name": name,
                         "line": {"color": colour, "width": 2, "shape": "hv"}, "marker": {"size": 4},
                         "hovertemplate": f"{name}<br>%{{x:.2f}} s: %{{y:.1f}} tokens/s<extra></extra>"})
    if not vanilla and not gumiho:
        _note(fig, "run a race to see the speeds")
    return fig


# ----------------------------------------------------------------------------- the draft tree


def tree_positions(parents: Sequence[int]) -> list[tuple[float, float]]:
    """(x, y) per node: x = depth, leaves spread evenly on y in depth-first
    order (siblings in their stored order), every inner node centred on its children."""
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    y = [0.0] * n
    next_leaf = [0.0]

    def place(i: int) -> float:
        if not children[i]:
            y[i] = next_leaf[0]
            next_leaf[0] += 1.0
        else:
            ys = [place(c) for c in children[i]]
            y[i] = (min(ys) + max(ys)) / 2
        return y[i]

    if n:
        place(0)
    return [(float(depth[i]), -y[i]) for i in range(n)]


def tree_figure(tokens_text: Sequence[str], parents: Sequence[int], depths: Sequence[int], probs: Sequence[float],
                accepted: Sequence[int], layout: DrafterLayout, target_choices: Sequence[str] = (),
                full_tree: Sequence[bool] = (), title: str = "") -> Figure:
    """One verify step's draft tree: nodes labelled with their token text and the
    head that proposed them (S1, S2 = serial steps, M1.. = MLP heads), the accepted
    path highlighted in its head colours, everything the target rejected greyed
    out, and the target's own choice at each depth written above the columns.
    Token text is escaped: plotly.js reads a few HTML tags in labels."""
    n = len(tokens_text)
    pos = tree_positions(parents)
    acc = set(accepted) | {0}
    xs = [p[0] for p in pos]
    ys = [p[1] for p in pos]
    top = (max(ys) if ys else 0) + 1.2
    bottom = (min(ys) if ys else 0) - 0.8
    max_x = max(max(xs, default=0), len(target_choices))
    rows = len({round(v, 3) for v in ys})
    fig = _figure(title or "Draft tree", height=max(320, min(900, 34 * (rows + 3))),
                  xaxis={"title": {"text": "depth = draft position"}, "tickmode": "linear", "dtick": 1,
                         "range": [-0.4, max_x + 1.1], "zeroline": False},
                  yaxis={"visible": False, "range": [bottom, top + 0.8]})
    fig.layout["margin"] = {"l": 20, "r": 20, "t": 50, "b": 45}
    fig.layout["showlegend"] = False
    # Edges: grey for rejected branches, dark and thick on the accepted path.
    for on_path, colour, width in ((False, palette.REJECTED_PLOT, 1.2), (True, palette.ACCEPT_EDGE, 3.5)):
        ex: list = []
        ey: list = []
        for i in range(1, n):
            if (i in acc) == on_path:
                p = parents[i]
                ex += [xs[p], xs[i], None]
                ey += [ys[p], ys[i], None]
        if ex:
            fig.data.append({"type": "scatter", "mode": "lines", "x": ex, "y": ey, "hoverinfo": "skip",
                             "line": {"color": colour, "width": width},
                             "name": "accepted path" if on_path else "rejected branches"})
    colours, labels, hovers, sizes, outlines = [], [], [], [], []
    for i in range(n):
        text = visible(tokens_text[i])
        short = text if len(text) <= 14 else text[:13] + "…"
        if i == 0:
            colours.append("#ffffff")
            outlines.append("#333333")
            sizes.append(20)
            labels.append(f"<b>{esc_plot(short)}</b><br>root")
            hovers.append(f"root: the last token already emitted ({esc_plot(text)})")
            continue
        d = depths[i]
        head, rank, count = palette.family_rank(d, layout.serial_positions, layout.max_depth)
        tag = f"S{d}" if head == "serial" else f"M{d - layout.serial_positions}"
        who = "serial Transformer" if head == "serial" else f"MLP head {d - layout.serial_positions}"
        extra = " (full-tree extension)" if i < len(full_tree) and full_tree[i] else ""
        on_path = i in acc
        colours.append(palette.plot_colour(head, rank, count) if on_path else palette.REJECTED_PLOT)
        outlines.append(palette.ACCEPT_EDGE if on_path else "#b0b0b0")
        sizes.append(18 if on_path else 12)
        labels.append(f"<b>{esc_plot(short)}</b><br>{tag}" if on_path else f"{esc_plot(short)}<br>{tag}")
        hovers.append(f"{esc_plot(text)}<br>depth {d} · {who}{extra}<br>draft prob {probs[i]:.3f}<br>"
                      f"{'accepted' if on_path else 'rejected'}")
    fig.data.append({"type": "scatter", "mode": "markers+text", "x": xs, "y": ys, "text": labels,
                     "textposition": "middle right", "textfont": {"size": 11}, "hovertext": hovers,
                     "hoverinfo": "text", "name": "nodes",
                     "marker": {"color": colours, "size": sizes, "line": {"color": outlines, "width": 2}}})
    for d, choice in enumerate(target_choices, start=1):
        fig.layout["annotations"].append({"x": d, "y": top, "text": f"target: <b>{esc_plot(visible(choice))}</b>",
                                          "showarrow": False, "font": {"size": 11, "color": "#111"},
                                          "bgcolor": "#f4f4f4", "bordercolor": "#bbb"})
    return fig
