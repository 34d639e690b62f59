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
from .plotroom import labels_that_fit, last_position, node_sizes, px_per_unit
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
    spans = [((1 + min(s, drafted)) / 2, lay.label_of("serial"), "serial")] if s else []
    if drafted > s:
        spans.append(((s + 1 + drafted) / 2, lay.label_of("mlp") if drafted - s > 1 else "MLP head 1", "mlp"))
        if s:
            fig.layout["shapes"].append({"type": "line", "x0": s + 0.5, "x1": s + 0.5, "y0": 0, "y1": 1,
                                         "yref": "paper", "line": {"color": "#999", "dash": "dot"}})
    for x, text, head in spans:
        # From the left end of its positions rightwards: centred on one position, a name
        # wider than it ran over the y axis's labels.
        left = x - (min(s, drafted) if head == "serial" else drafted - s) / 2
        # Above the plot area (paper coordinates), not at a data height: a conditional
        # acceptance of 1.0 draws its marker at the top of the data range, and on a page
        # that gives the plot less height a label inside the range sat on it.
        fig.layout["annotations"].append({"x": left, "y": 1, "yref": "paper", "yanchor": "bottom", "yshift": 2,
                                          "text": text, "showarrow": False, "xanchor": "left",
                                          "font": {"color": palette.plot_colour(head, 0, 1)}})


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


# The copy proposer's green is app.palette's; its band here is lighter, and its nodes are diamonds,
# so that they read without colour too.
COPY_BAND = "#e2f4e8"
OK_EDGE = "#16752a"  # the verdicts' colours, as in the walkthrough's table (assets/style.css)
NO_EDGE = "#a02020"


def default_head(depth: int, layout: DrafterLayout) -> str:
    """Who proposes a node at ``depth`` when the tree does not say: the drafter's
    serial Transformer up to its serial positions, its MLP heads below; deeper than
    the drafter reaches only the copy proposer can have put a node."""
    if depth <= 0:
        return "root"
    if depth <= layout.serial_positions:
        return "serial"
    return "mlp" if depth <= layout.max_depth else "copy"


def node_heads(heads: Optional[Sequence[str]], depths: Sequence[int], layout: DrafterLayout,
               copied: Sequence[bool] = ()) -> list[str]:
    """The proposer of every node: ``heads`` when given for every node (a tree that
    records them), else "copy" where ``copied`` marks a node, else the drafter's head
    family at the node's depth."""
    if heads is not None and len(heads) == len(depths) and len(depths):
        return ["root"] + [str(h) for h in list(heads)[1:]]
    out = []
    for i, d in enumerate(depths):
        if i == 0:
            out.append("root")
        elif i < len(copied) and copied[i]:
            out.append("copy")
        else:
            out.append(default_head(d, layout))
    return out


def proposer(head: str, depth: int, layout: DrafterLayout) -> tuple[str, str]:
    """(tag, name) of whoever proposed a node at ``depth``: S1, S2 = the serial
    Transformer's steps, M1.. = the MLP heads, C = copied from the context."""
    if head == "serial":
        return f"S{depth}", f"serial Transformer (step {depth})"
    if head == "mlp":
        k = depth - layout.serial_positions
        return f"M{k}", f"MLP head {k}"
    if head == "copy":
        return "C", "copied from the context"
    return "", "root"


def head_colour(head: str, depth: int, layout: DrafterLayout, shade: str = "node") -> str:
    """A node's colour, in its family and position's shade (``shade="node"``); its
    family's deepest shade, for text that must stay readable (``"text"``); or its
    family's lightest, the same for every depth, behind the columns (``"band"``)."""
    if head == "copy":
        return COPY_BAND if shade == "band" else palette.COPY_PLOT
    if head not in ("serial", "mlp"):
        return "#ffffff" if shade == "band" else palette.NEUTRAL_PLOT
    family, rank, count = palette.family_rank(depth, layout.serial_positions, layout.max_depth)
    if shade == "band":
        return palette.token_background(family, count - 1, count)
    return palette.plot_colour(family, 0 if shade == "text" else rank, count)


def tree_figure(tokens_text: Sequence[str], parents: Sequence[int], depths: Sequence[int], probs: Sequence[float],
                accepted: Sequence[int], layout: Optional[DrafterLayout], target_choices: Sequence[str] = (),
                full_tree: Sequence[bool] = (), title: str = "", heads: Optional[Sequence[str]] = None) -> Figure:
    """One verify step's draft tree, readable at the paper's size (~70 nodes, depth 7).

    Every depth is a column, headed by who proposed its nodes (S1, S2 = the serial
    Transformer's steps, M1.. = the MLP heads) and shaded in that family's colour,
    so the serial and parallel parts of the drafter read at a glance even where
    every node was rejected. Nodes carry only their token: a second line per node
    would overlap at this size, and the column says the head (a node whose proposer
    differs from its column's, a copied one, says so itself). The accepted path is
    drawn thick, its nodes in their head's colour; the rest is grey. Above the
    columns, the target's own choice at each depth: ticked while the path holds,
    crossed where it breaks (that token becomes the bonus token). ``heads``: the
    proposer of every node ("root", "serial", "mlp", "copy"), when the tree records
    it; else derived from the depth. Token text is escaped: plotly.js reads a few
    HTML tags in labels."""
    lay = _layout_or_default(layout)
    n = len(tokens_text)
    heads = node_heads(heads, depths, lay)
    pos = tree_positions(parents)
    acc = set(accepted) | {0}
    last = accepted[-1] if accepted else 0
    broke = len(accepted) + 1  # the depth where the accepted path stops: the bonus token's
    drafted_below_last = any(parents[i] == last for i in range(1, n))
    xs = [p[0] for p in pos]
    ys = [p[1] for p in pos]
    top = (max(ys) if ys else 0) + 0.8
    bottom = (min(ys) if ys else 0) - 0.8
    max_x = int(max(max(xs, default=0), len(target_choices)))
    rows = len({round(v, 3) for v in ys})
    height, roomy = tree_height(rows)
    fig = _figure(title or "Draft tree", height=height,
                  xaxis={"title": {"text": _families_title(lay, max_x)}, "tickmode": "array",
                         "tickvals": list(range(max_x + 1)), "ticktext": _column_heads(heads, depths, lay, max_x),
                         "side": "bottom", "range": [-0.4, max_x + 0.9], "zeroline": False, "showgrid": False},
                  yaxis={"visible": False, "range": [bottom, top]})
    # The target's choices sit in the top margin, under the title, clear of the nodes.
    fig.layout["margin"] = {"l": 20, "r": 20, "t": TREE_TOP_PX, "b": 70, "autoexpand": False}
    fig.layout["title"].update({"y": 1, "yref": "container", "yanchor": "top", "pad": {"t": 8}})
    fig.layout["showlegend"] = False
    unit_px = px_per_unit(height, fig.layout["margin"], (bottom, top))
    for d in range(1, max_x + 1):
        fig.layout["shapes"].append({"type": "rect", "xref": "x", "yref": "paper", "x0": d - 0.49, "x1": d + 0.49,
                                     "y0": 0, "y1": 1, "layer": "below", "line": {"width": 0}, "opacity": 0.55,
                                     "fillcolor": head_colour(default_head(d, lay), d, lay, shade="band")})
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
    choice_at = {d: visible(c) for d, c in enumerate(target_choices, start=1)}
    colours, labels, hovers, sizes, outlines, symbols = [], [], [], [], [], []
    # Where rows are too tight for every label, the nodes a class reads keep theirs: the
    # accepted path, then the drafts competing with it at each depth, then the likeliest;
    # a label that would touch one kept already is left to the hover.
    competing = {i for i in range(1, n) if parents[i] in acc and i not in acc}
    order = sorted(range(n), key=lambda i: (i not in acc, i not in competing, -probs[i] if i else 0.0))
    labelled = labels_that_fit(xs, ys, order if roomy else [i for i in order if i in acc or i in competing],
                               unit_px)
    for i in range(n):
        text = visible(tokens_text[i])
        short = node_label(text)
        if i == 0:
            colours.append("#ffffff")
            outlines.append("#333333")
            sizes.append(20)
            symbols.append("circle")
            labels.append(f"<b>{esc_plot(short)}</b>")
            hovers.append(f"root: the last token already emitted ({esc_plot(text)})")
            continue
        d = depths[i]
        head = heads[i]
        tag, who = proposer(head, d, lay)
        on_path = i in acc
        colours.append(head_colour(head, d, lay) if on_path else palette.REJECTED_PLOT)
        outlines.append(palette.ACCEPT_EDGE if on_path else "#b0b0b0")
        sizes.append(18 if on_path else 12)
        symbols.append("diamond" if head == "copy" else "circle")
        label = f"<b>{esc_plot(short)}</b>" if on_path else esc_plot(short)
        if head != default_head(d, lay):
            label += f" <i>{tag}</i>"
        labels.append(label if i in labelled else "")
        extra = " (full-tree extension)" if i < len(full_tree) and full_tree[i] else ""
        if on_path:
            verdict = "accepted"
        elif parents[i] == last and d == broke:
            verdict = f"rejected: the target chose {esc_plot(choice_at.get(d, '?'))} here"
        else:
            verdict = "discarded: its branch leaves the accepted path"
        prob = "copied: no draft probability" if head == "copy" else f"draft prob {probs[i]:.3f}"
        hovers.append(f"{esc_plot(text)}<br>depth {d} · {who}{extra}<br>{prob}<br>{verdict}")
    fig.data.append({"type": "scatter", "mode": "markers+text", "x": xs, "y": ys, "text": labels,
                     "textposition": "middle right", "textfont": {"size": 11}, "hovertext": hovers,
                     "hoverinfo": "text", "name": "nodes",
                     "marker": {"color": colours, "size": node_sizes(xs, ys, sizes, unit_px), "symbol": symbols,
                                "line": {"color": outlines, "width": 2}}})
    for d, choice in choice_at.items():
        # Two short lines: on one, a long token's box ran into its neighbours'.
        short = esc_plot(node_label(choice))
        if d < broke:
            text, border = f"✓ target:<br><b>{short}</b>", OK_EDGE
        elif drafted_below_last:  # the drafts here were checked and none matched
            text, border = f"✗ target (bonus):<br><b>{short}</b>", NO_EDGE
        else:  # the tree ended before this depth: nothing to reject
            text, border = f"target (bonus):<br><b>{short}</b>", "#bbb"
        fig.layout["annotations"].append({"x": d, "y": 1, "yref": "paper", "yanchor": "bottom", "yshift": 4,
                                          "text": text, "showarrow": False,
                                          "font": {"size": 11, "color": "#111"}, "bgcolor": "#f4f4f4",
                                          "bordercolor": border})
    return fig


TREE_TOP_PX = 96  # the title, and under it the target's choices (two lines each)
TREE_MAX_HEIGHT = 640  # px: the figure fits a laptop's or a projector's screen with its header
ROW_PX = 20  # a row per leaf, enough for one line of 11 px text


def tree_height(rows: int) -> tuple[int, bool]:
    """(height, whether every node can carry its label) for a tree of ``rows`` leaves.
    The paper's tree has some 50: at 20 px a row it would be a thousand pixels tall."""
    wanted = ROW_PX * rows + 170
    return max(320, min(TREE_MAX_HEIGHT, wanted)), wanted <= TREE_MAX_HEIGHT


def node_label(text: str) -> str:
    """A node's label: short, and a token of punctuation or space alone in guillemets
    (a bare "," or "." is a speck next to its marker)."""
    short = text if len(text) <= 14 else text[:13] + "…"
    return short if any(ch.isalnum() for ch in short) else f"‹{short}›"


def _column_heads(heads: Sequence[str], depths: Sequence[int], lay: DrafterLayout, max_x: int) -> list[str]:
    """Tick labels: every depth's proposers (those of its nodes, else the drafter's
    head there), each in its colour."""
    present: dict[int, list[str]] = {}
    for i in range(1, len(depths)):
        seen = present.setdefault(depths[i], [])
        if heads[i] not in seen:
            seen.append(heads[i])
    out = ["root"]
    for d in range(1, max_x + 1):
        parts = []
        for h in present.get(d) or [default_head(d, lay)]:
            tag, who = proposer(h, d, lay)
            short = {"serial": f"serial step {d}", "copy": "copy"}.get(h, who)
            parts.append(f'<span style="color:{head_colour(h, d, lay, shade="text")}"><b>{tag}</b> {short}</span>')
        out.append("<br>".join(parts))
    return out


def _families_title(lay: DrafterLayout, max_x: int) -> str:
    """The x axis's title: depth, and which family of heads the colours stand for."""
    families = []
    if lay.serial_positions >= 1:
        families.append(f'<span style="color:{palette.plot_colour("serial", 0, 1)}">blue: serial Transformer</span>')
    if lay.max_depth > lay.serial_positions and max_x > lay.serial_positions:
        families.append(f'<span style="color:{palette.plot_colour("mlp", 0, 1)}">orange: parallel MLP heads</span>')
    return "depth = draft position · " + " · ".join(families) if families else "depth = draft position"
