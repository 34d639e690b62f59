"""The Compare tab's figures: acceptance by draft position with one line per drafter
(each position's marker in the colour of the head that drafted it: serial blue, MLP
orange, copied green, as everywhere in the app), and where each decoder's verify
step goes (drafting and verifying, stacked)."""
from __future__ import annotations

from typing import Optional

from gumiho.heads import HeadFamily

from ..views import palette
from ..views.figures import Figure, _figure, _legend_below, _note
from .run import Compared, Comparison
from .summary import step_time

SHORT = {"gumiho": "Gumiho", "serial": "All-serial", "parallel": "All-parallel", "eagle3": "EAGLE-3",
         "copy": "Copying", "gumiho+copy": "Gumiho + copying", "vanilla": "Vanilla"}
# One line per drafter: colours that are none of the head families' (blue, orange, green), and a dash each.
LINES = {"gumiho": (palette.GUMIHO_LINE, "solid"), "serial": ("#7b3fa0", "dash"), "parallel": ("#a0522d", "dot"),
         "eagle3": ("#c2185b", "dashdot"), "copy": ("#607d8b", "longdash"), "gumiho+copy": ("#455a64", "longdashdot")}
DRAFTING, VERIFYING = "#e4a11b", "#8c8c8c"


def _head_colour(c: Compared, d: int) -> str:
    """The colour of the head that drafts position ``d`` for this drafter (the copy
    proposer alone: green everywhere)."""
    lay = c.record.layout
    if lay is None or lay.max_depth == 0:
        return palette.COPY_PLOT
    if d > lay.max_depth:
        return palette.COPY_PLOT
    return palette.position_colour(d, lay.serial_positions, lay.max_depth)


def acceptance_lines(cmp: Optional[Comparison], conditional: bool = False) -> Figure:
    """Unconditional acceptance at d (share of verify steps whose accepted length is
    >= d) or conditional (that share over the one at d-1), one line per drafter."""
    what = "Conditional acceptance" if conditional else "Acceptance"
    depth = cmp.depth if cmp is not None else 3
    fig = _figure(f"{what} by draft position, every drafter", height=420,
                  xaxis={"title": {"text": "draft position d"}, "tickmode": "linear", "dtick": 1,
                         "range": [0.6, depth + 0.4]},
                  yaxis={"title": {"text": "conditional acceptance" if conditional else "acceptance"},
                         "range": [0, 1.05]})
    _legend_below(fig)
    if cmp is None or not any(c.stats.verify_steps for c in cmp.drafters):
        _note(fig, "Compare the drafters to see one line per drafter here.")
        return fig
    xs = list(range(1, depth + 1))
    for c in cmp.drafters:
        st = c.stats
        if not st.verify_steps:
            continue
        ys = st.conditional_acceptance_by_position(depth) if conditional else st.acceptance_by_position(depth)
        colour, dash = LINES.get(c.method, ("#333333", "solid"))
        fig.data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": [round(y, 4) for y in ys],
                         "name": SHORT.get(c.method, c.label), "line": {"color": colour, "dash": dash, "width": 2},
                         "marker": {"size": 10, "color": [_head_colour(c, d) for d in xs],
                                    "line": {"color": colour, "width": 1.5}},
                         "hovertemplate": f"{SHORT.get(c.method, c.label)}<br>position %{{x}}<br>{what.lower()} "
                                          f"%{{y:.2f}}<extra></extra>"})
    # What the markers' colours mean, as legend entries of their own.
    for family, words in ((HeadFamily.SERIAL, "marker: a serial step drafted it"),
                          (HeadFamily.MLP, "marker: an MLP head drafted it")):
        fig.data.append({"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": words,
                         "marker": {"size": 10, "color": palette.plot_colour(family, 0, 1)},
                         "hoverinfo": "skip"})
    return fig


def step_time_figure(cmp: Optional[Comparison]) -> Figure:
    """Mean milliseconds of a verify step per decoder, drafting under verifying
    (vanilla's step is one plain forward, with nothing drafted)."""
    fig = _figure("Where a step's time goes (ms per verify step)", height=420,
                  xaxis={"title": {"text": "decoder"}},
                  yaxis={"title": {"text": "milliseconds per step"}, "rangemode": "tozero"})
    _legend_below(fig)
    fig.layout["barmode"] = "stack"
    if cmp is None:
        _note(fig, "Compare the drafters to see each one's drafting and verify time here.")
        return fig
    names, draft, verify = [], [], []
    for method, run in [("vanilla", cmp.vanilla)] + [(c.method, c.record) for c in cmp.drafters]:
        t = step_time(run)
        if t is None:
            continue
        names.append(SHORT.get(method, method))
        draft.append(round(t.draft_ms, 2))
        verify.append(round(t.verify_ms, 2))
    fig.data.append({"type": "bar", "x": names, "y": verify, "name": "verifying (the target's forward)",
                     "marker": {"color": VERIFYING}, "hovertemplate": "%{x}<br>verifying %{y:.1f} ms<extra></extra>"})
    fig.data.append({"type": "bar", "x": names, "y": draft, "name": "drafting",
                     "marker": {"color": DRAFTING}, "hovertemplate": "%{x}<br>drafting %{y:.1f} ms<extra></extra>"})
    return fig
