"""Room on a figure, in pixels: where its texts and markers can go without one
drawn over another. The figures are built as JSON before the browser draws them,
so sizes are worked out from the figure's own height, margins and y range; the
widths that vary with the page (the x direction) are left with room to spare.

Checked in a real browser, at the page's widths, by tests/app/views/test_figures_browser.py.
"""
from __future__ import annotations

from typing import Iterable, Sequence

LABEL_PX = 14  # one line of 11 px text, with its leading
NODE_GAP_PX = 3  # at least this much paper between two nodes of one column (their outlines included)
OUTLINE_PX = 2  # a node's outline, drawn half outside its marker


def px_per_unit(height: int, margin: dict, y_range: Sequence[float]) -> float:
    """How many pixels one unit of the y axis takes on a figure ``height`` px tall."""
    plot_px = height - margin.get("t", 0) - margin.get("b", 0)
    return plot_px / max(1e-9, y_range[1] - y_range[0])


def _columns(xs: Sequence[float]) -> dict:
    cols: dict = {}
    for i, x in enumerate(xs):
        cols.setdefault(round(x, 3), []).append(i)
    return cols


def node_sizes(xs: Sequence[float], ys: Sequence[float], wanted: Sequence[float], unit_px: float) -> list[float]:
    """Marker sizes (diameters, px): each node's ``wanted`` size where its column has
    room, else the size that keeps every two nodes of the column apart. One size per
    crowded column, so that a label beside any node clears every marker of its column."""
    out = list(wanted)
    for col in _columns(xs).values():
        rows = sorted(ys[i] for i in col)
        gaps = [(b - a) * unit_px for a, b in zip(rows, rows[1:])]
        if not gaps:
            continue
        room = min(gaps) - NODE_GAP_PX - OUTLINE_PX
        if room < max(wanted[i] for i in col):
            for i in col:
                out[i] = max(4.0, min(wanted[i], room))
    return out


def labels_that_fit(xs: Sequence[float], ys: Sequence[float], order: Iterable[int], unit_px: float) -> set[int]:
    """The nodes, taken in ``order`` (the most telling first), whose one-line label
    beside them clears the labels already kept in their column."""
    kept: set[int] = set()
    taken: dict = {}
    for i in order:
        col = taken.setdefault(round(xs[i], 3), [])
        if all(abs(ys[i] - y) * unit_px >= LABEL_PX for y in col):
            col.append(ys[i])
            kept.add(i)
    return kept


def last_position(first: int, values: Iterable[Sequence[float]], start: int = 1) -> int:
    """The last position an axis must show: ``first`` (where the heads end), or a later
    one where any of ``values`` (indexed from position ``start``) has something to draw."""
    last = first
    for series in values:
        for k, v in enumerate(series):
            if v:
                last = max(last, k + start)
    return last
