"""The draft tree of one verify step as a plotly figure (the walkthrough's): a
column per depth headed and shaded by the head that proposes there, every node
coloured by the head that proposed it as the tree records it, the accepted path
drawn thick, and the target's own choice above each column."""
from __future__ import annotations

from typing import Optional, Sequence

from gumiho.heads import HeadFamily

from ..views import palette
from ..views.figures import Figure, _figure
from ..views.plotroom import labels_that_fit, node_sizes, px_per_unit
from ..views.records import DrafterLayout
from ..views.render import esc_plot, token_mark, visible


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


# The copy proposer's green is app.views.palette's; its band here is lighter, and its nodes are diamonds,
# so that they read without colour too.
COPY_BAND = "#e2f4e8"
OK_EDGE = "#16752a"  # the verdicts' colours, as in the walkthrough's table (assets/style.css)
NO_EDGE = "#a02020"


def proposer(head: str, depth: int, layout: DrafterLayout) -> tuple[str, str]:
    """(tag, name) of whoever proposed a node at ``depth``: S1, S2 = the serial
    Transformer's steps, M1.. = the MLP heads, C = copied from the context."""
    if head == HeadFamily.SERIAL:
        return f"S{depth}", f"serial Transformer (step {depth})"
    if head == HeadFamily.MLP:
        k = depth - layout.serial_positions
        return f"M{k}", f"MLP head {k}"
    if head == HeadFamily.COPY:
        return "C", "copied from the context"
    return "", "root"


def head_colour(head: str, depth: int, layout: DrafterLayout, shade: str = "node") -> str:
    """A node's colour, in its family and position's shade (``shade="node"``); its
    family's deepest shade, for text that must stay readable (``"text"``); or its
    family's lightest, the same for every depth, behind the columns (``"band"``)."""
    if head == HeadFamily.COPY:
        return COPY_BAND if shade == "band" else palette.COPY_PLOT
    if head not in (HeadFamily.SERIAL, HeadFamily.MLP):
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
    crossed where it breaks (that token becomes the bonus token). ``heads``: who
    proposed every node, as the draft tree records it (``DraftTree.heads``: the
    root's word is ignored; "serial", "mlp", "copy"); None for a tree that does not
    say (then its drafter's head at each depth). Token text is escaped: plotly.js
    reads a few HTML tags in labels."""
    lay = layout or DrafterLayout()
    n = len(tokens_text)
    heads = (["root"] + [str(h) for h in list(heads)[1:]] if heads is not None and len(heads) == n and n
             else ["root"] + [lay.family_at(d) for d in depths[1:]])
    pos = tree_positions(parents)
    acc = set(accepted) | {0}
    xs = [p[0] for p in pos]
    ys = [p[1] for p in pos]
    top = (max(ys) if ys else 0) + 0.8
    bottom = (min(ys) if ys else 0) - 0.8
    max_x = int(max(max(xs, default=0), len(target_choices)))
    height = tree_height(len({round(v, 3) for v in ys}))
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
                                     "fillcolor": head_colour(lay.family_at(d), d, lay, shade="band")})
    _edges(fig, parents, xs, ys, acc)
    choice_at = {d: visible(c) for d, c in enumerate(target_choices, start=1)}
    # Where rows are too tight for every label, the nodes a class reads keep theirs: the
    # accepted path, then the drafts competing with it at each depth, then the likeliest;
    # a label that would touch one kept already in its column is left to the hover. A
    # column with room (the MLP heads' few paths beside a crowded serial column) labels
    # every node.
    competing = {i for i in range(1, n) if parents[i] in acc and i not in acc}
    order = sorted(range(n), key=lambda i: (i not in acc, i not in competing, -probs[i] if i else 0.0))
    labelled = labels_that_fit(xs, ys, order, unit_px)
    nodes = _nodes(tokens_text, parents, depths, probs, accepted, heads, lay, full_tree, choice_at, labelled, xs, ys,
                   unit_px)
    fig.data.append(nodes)
    _path_labels(fig, nodes, acc)
    last = accepted[-1] if accepted else 0
    _target_choices(fig, choice_at, len(accepted) + 1, any(parents[i] == last for i in range(1, n)))
    return fig


def _edges(fig: Figure, parents: Sequence[int], xs: list, ys: list, acc: set) -> None:
    """Edges: grey for rejected branches, dark and thick on the accepted path."""
    for on_path, colour, width in ((False, palette.REJECTED_PLOT, 1.2), (True, palette.ACCEPT_EDGE, 3.5)):
        ex: list = []
        ey: list = []
        for i in range(1, len(parents)):
            if (i in acc) == on_path:
                p = parents[i]
                ex += [xs[p], xs[i], None]
                ey += [ys[p], ys[i], None]
        if ex:
            fig.data.append({"type": "scatter", "mode": "lines", "x": ex, "y": ey, "hoverinfo": "skip",
                             "line": {"color": colour, "width": width},
                             "name": "accepted path" if on_path else "rejected branches"})


def _nodes(tokens_text, parents, depths, probs, accepted, heads, lay: DrafterLayout, full_tree, choice_at: dict,
           labelled: set, xs: list, ys: list, unit_px: float) -> dict:
    """The nodes' trace: each in its head's colour on the accepted path, grey off it;
    copied nodes are diamonds; the hover says who proposed it and the verdict."""
    n = len(tokens_text)
    acc = set(accepted) | {0}
    last = accepted[-1] if accepted else 0
    broke = len(accepted) + 1  # the depth where the accepted path stops: the bonus token's
    colours, labels, hovers, sizes, outlines, symbols = [], [], [], [], [], []
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
        symbols.append("diamond" if head == HeadFamily.COPY else "circle")
        label = f"<b>{esc_plot(short)}</b>" if on_path else esc_plot(short)
        if head != lay.family_at(d):
            label += f" <i>{tag}</i>"
        labels.append(label if i in labelled else "")
        extra = " (full-tree extension)" if i < len(full_tree) and full_tree[i] else ""
        if on_path:
            verdict = "accepted"
        elif parents[i] == last and d == broke:
            verdict = f"rejected: the target chose {esc_plot(choice_at.get(d, '?'))} here"
        else:
            verdict = "discarded: its branch leaves the accepted path"
        prob = "copied: no draft probability" if head == HeadFamily.COPY else f"draft prob {probs[i]:.3f}"
        hovers.append(f"{esc_plot(text)}<br>depth {d} · {who}{extra}<br>{prob}<br>{verdict}")
    return {"type": "scatter", "mode": "markers+text", "x": xs, "y": ys, "text": labels,
            "textposition": "middle right", "textfont": {"size": 11}, "hovertext": hovers,
            "hoverinfo": "text", "name": "nodes",
            "marker": {"color": colours, "size": node_sizes(xs, ys, sizes, unit_px), "symbol": symbols,
                       "line": {"color": outlines, "width": 2}}}


def _path_labels(fig: Figure, nodes: dict, acc: set) -> None:
    """The accepted path's labels as boxed annotations instead of the nodes' own text:
    the path's thick line leaves each node to the right, where a label sits, and a box
    drawn over the line keeps the token readable (the line runs on beneath it)."""
    texts = nodes["text"]
    for i in sorted(acc):
        if i >= len(texts) or not texts[i]:
            continue
        fig.layout["annotations"].append({
            "x": nodes["x"][i], "y": nodes["y"][i], "xref": "x", "yref": "y", "text": texts[i], "showarrow": False,
            "xanchor": "left", "yanchor": "middle", "xshift": nodes["marker"]["size"][i] / 2 + 3,
            "font": {"size": 11, "color": "#111"}, "bgcolor": "rgba(255,255,255,0.92)", "borderpad": 1,
            "name": f"node {i}"})
        texts[i] = ""


def drawn_labels(fig: Figure) -> list[str]:
    """The label drawn at each node, whether the node's own text or its boxed annotation."""
    labels = list(fig.trace("nodes")["text"])
    for a in fig.layout["annotations"]:
        if str(a.get("name", "")).startswith("node "):
            labels[int(a["name"].split()[1])] = a["text"]
    return labels


def _target_choices(fig: Figure, choice_at: dict, broke: int, drafted_below_last: bool) -> None:
    """Above the columns, in the top margin, the target's own token at each depth:
    ticked while the accepted path holds, crossed where it breaks (the bonus token)."""
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


TREE_TOP_PX = 96  # the title, and under it the target's choices (two lines each)
TREE_MAX_HEIGHT = 640  # px: the figure fits a laptop's or a projector's screen with its header
ROW_PX = 20  # a row per leaf, enough for one line of 11 px text


def tree_height(rows: int) -> int:
    """The plot's height in pixels for a tree of ``rows`` leaves, capped: the paper's
    tree has some 50, and at 20 px a row it would be a thousand pixels tall."""
    return max(320, min(TREE_MAX_HEIGHT, ROW_PX * rows + 170))


def node_label(text: str) -> str:
    """A node's label: the token as the walkthrough's table shows it (render.token_mark), short."""
    marked = token_mark(text)
    return marked if len(marked) <= 14 else marked[:13] + "…"


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
        for h in present.get(d) or [lay.family_at(d)]:
            tag, who = proposer(h, d, lay)
            short = {HeadFamily.SERIAL: f"serial step {d}", HeadFamily.COPY: HeadFamily.COPY}.get(h, who)
            parts.append(f'<span style="color:{head_colour(h, d, lay, shade="text")}"><b>{tag}</b> {short}</span>')
        out.append("<br>".join(parts))
    return out


def _families_title(lay: DrafterLayout, max_x: int) -> str:
    """The x axis's title: depth, and which family of heads the colours stand for."""
    families = []
    if lay.serial_positions >= 1:
        families.append(f'<span style="color:{palette.plot_colour(HeadFamily.SERIAL, 0, 1)}">blue: serial Transformer</span>')
    if lay.max_depth > lay.serial_positions and max_x > lay.serial_positions:
        families.append(f'<span style="color:{palette.plot_colour(HeadFamily.MLP, 0, 1)}">orange: parallel MLP heads</span>')
    return "depth = draft position · " + " · ".join(families) if families else "depth = draft position"
