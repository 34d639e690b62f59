"""The app's figures drawn by plotly.js in a real headless Chromium, at the widths
the page gives them at 1280 and 1920 px, and checked for text drawn over text
(issue 54, items 2 and 3): the acceptance and accepted-length plots empty, after
a Stop that left no verify step and at every tree depth, with and without copying;
the walkthrough's tree at the paper's size. The page's own plots are checked the
same way in test_app_browser.py."""
from __future__ import annotations

import os
import random

import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"needs Chromium at {CHROMIUM}", allow_module_level=True)
import plotly  # noqa: E402
from playwright import sync_api  # noqa: E402

from app.core.forms import PAPER_TREE_SETTINGS  # noqa: E402
from app.views import figures
from app.views.records import DrafterLayout  # noqa: E402
from app.walkthrough import treeplot  # noqa: E402
from gumiho import GenerationStats  # noqa: E402

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.browser]

PLOTLY_JS = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]
# A plot's width on the page: the race's two side by side, the walkthrough's tree the
# whole width (Gradio's container stops growing at 1536 px).
HALF = {1024: 448, 1280: 576, 1920: 728}
FULL = {1024: 944, 1280: 1200, 1920: 1480}

# Every text of a drawn figure and every node marker, and the pairs that overlap by
# more than a pixel each way (touching outlines are not overlap).
# Node against node counts only where nodes are a tree's (nodeOnNode): the markers of a
# line over time (the speed plot's samples) may touch one another, and that hides nothing.
OVERLAPS = """([root, nodeOnNode]) => {
  const boxes = [];
  for (const el of root.querySelectorAll('svg text')) {
    if (!el.textContent.trim()) continue;
    const st = getComputedStyle(el);
    if (st.display === 'none' || st.visibility === 'hidden' || st.opacity === '0') continue;
    const r = el.getBoundingClientRect();
    if (r.width && r.height) boxes.push({kind: 'text', what: el.textContent.slice(0, 40), r});
  }
  for (const el of root.querySelectorAll('.scatterlayer .point')) {
    const r = el.getBoundingClientRect();
    if (r.width && r.height) boxes.push({kind: 'node', what: 'node', r});
  }
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i].r, b = boxes[j].r;
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (!nodeOnNode && boxes[i].kind === 'node' && boxes[j].kind === 'node') continue;
    if (w > 1 && h > 1) out.push(boxes[i].what + ' | ' + boxes[j].what);
  }
  return out;
}"""


@pytest.fixture(scope="module")
def page():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1920, "height": 1200})
        pg.set_content('<div id="plot"></div>')
        pg.add_script_tag(path=PLOTLY_JS)
        yield pg
        browser.close()


def overlaps(page, fig, width: int) -> list[str]:
    """Draw ``fig`` ``width`` px wide; the overlapping pairs of its texts and nodes."""
    page.evaluate("""([spec, width]) => {
        const el = document.getElementById('plot');
        Plotly.purge(el);
        el.style.width = width + 'px';
        const fig = JSON.parse(spec);
        return Plotly.newPlot(el, fig.data, {...fig.layout, width: width}, {displayModeBar: false});
    }""", [fig.to_json(), width])
    return page.evaluate(OVERLAPS, [page.locator("#plot").element_handle(), True])


def stats_for(accepted_lengths: list[int], copied: list[int] = ()) -> GenerationStats:
    hist = [0] * (max(accepted_lengths, default=0) + 1)
    for k in accepted_lengths:
        hist[k] += 1
    return GenerationStats(new_tokens=sum(accepted_lengths) + len(accepted_lengths),
                           target_forwards=len(accepted_lengths) + 1, verify_steps=len(accepted_lengths),
                           accepted_hist=hist, copied_by_position=list(copied))


COPY = 8  # the copy proposer's longest guess (gumiho.CopySettings)
STOPPED = GenerationStats()  # a Stop before the first verify step


def plot_cases():
    yield "empty", None, DrafterLayout()
    yield "empty, CPU tree", None, DrafterLayout(tree_depth=3)
    for copy in (0, COPY):
        yield f"stopped, no verify step, depth 1, copy {copy}", STOPPED, DrafterLayout(copy=copy, tree_depth=1)
        for depth in range(1, 8):
            lengths = [min(depth, k) for k in (0, 1, 1, 2, 3, 5, 7, depth)]
            copied = [1 if d <= 2 else 0 for d in range(1, 9)] if copy else []
            yield (f"depth {depth}, copy {copy}", stats_for(lengths, copied),
                   DrafterLayout(copy=copy, tree_depth=depth))
            # Every step accepted the whole tree: the conditional line runs along 1.0,
            # under the families' names.
            yield (f"depth {depth}, copy {copy}, all accepted", stats_for([depth] * 4, copied),
                   DrafterLayout(copy=copy, tree_depth=depth))


@pytest.mark.parametrize("viewport", sorted(HALF))
def test_the_race_plots_never_draw_text_over_text(page, viewport):
    bad = []
    for name, stats, lay in plot_cases():
        for figure in (figures.acceptance_figure, figures.accepted_length_figure):
            found = overlaps(page, figure(stats, lay), HALF[viewport])
            if found:
                bad.append(f"{figure.__name__}, {name}: {found[:3]}")
    assert not bad, "\n".join(bad)


def test_the_acceptance_plot_draws_nothing_where_nothing_was_drafted():
    lay = DrafterLayout(copy=COPY, tree_depth=1)
    for stats in (STOPPED, None):
        fig = figures.acceptance_figure(stats, lay)
        line = fig.trace("conditional: P(d accepted | d−1 accepted)")
        assert all(v is None for v in line["y"]), line["y"]  # no verify step: no value anywhere
    fig = figures.acceptance_figure(stats_for([0, 1, 1]), lay)
    line = fig.trace("conditional: P(d accepted | d−1 accepted)")
    assert all(v is None for v in line["y"][1:]), line["y"]  # positions 2-7: not drafted, nothing accepted
    # The x axis ends where the heads end (position 7), not at the copy proposer's longest guess.
    assert fig.layout["xaxis"]["range"][1] == pytest.approx(7.6)


def walk_tree():
    """A verify step's tree at the paper's size, built as the library builds it (the
    paper's tree settings on a tiny model with a random drafter), with tokens as long
    as words are: the shape the walkthrough draws."""
    from app.models.hub import _random_drafter
    from gumiho import GenerationSettings, stream
    from helpers import tiny_target

    target = tiny_target("llama", vocab=320, hidden=32, eos=319, seed=5)
    drafter = _random_drafter(target, "gumiho")
    settings = GenerationSettings(max_new_tokens=4, tree=PAPER_TREE_SETTINGS)
    ev = next(e for e in stream(target, [5, 6, 7, 8], drafter, settings, keep_trees=True) if e.tree is not None)
    return ev.tree


WORDS = [" of", " depths", " heart", ",", " the", " ocean", " whispers", " and", " beneath", "␣", " waves",
         " silence", " a", " tide", " moon", " of the", " deep", " light"]


def tree_cases():
    tree = walk_tree()
    parents = [int(p) for p in tree.parents]
    depths = [int(d) for d in tree.depths]
    rng = random.Random(3)
    text = [rng.choice(WORDS) for _ in parents]
    # An accepted path along the first child at each depth, as deep as the tree goes.
    path, node = [], 0
    while True:
        kids = [i for i, p in enumerate(parents) if p == node]
        if not kids:
            break
        node = kids[0]
        path.append(node)
    for accepted in (path, path[:2], []):
        yield len(accepted), text, parents, depths, accepted


@pytest.mark.parametrize("viewport", sorted(FULL))
def test_the_walkthrough_tree_never_draws_text_or_nodes_over_each_other(page, viewport):
    lay = DrafterLayout()
    bad = []
    for n, text, parents, depths, accepted in tree_cases():
        choices = [" of", " the", " depths", " heart", " sea", " light", " a"][:len(accepted) + 1]
        fig = treeplot.tree_figure(text, parents, depths, [0.5] * len(parents), accepted, lay, choices,
                                  title="Draft tree of verify step 3: 70 drafted tokens, the accepted path drawn thick")
        found = overlaps(page, fig, FULL[viewport])
        if found:
            bad.append(f"accepted {n}: {found[:4]} ({len(found)})")
    assert len(parents) > 60
    assert not bad, "\n".join(bad)



# The accepted path's labels (issue 60: its thick line ran through them): each a box over
# the lines, opaque enough to read, wider than its text, and painted after the plot's lines.
BOXED_LABELS = """() => {
  const svg = document.querySelector('#plot svg.main-svg');
  const layers = [...document.querySelectorAll('#plot g.cartesianlayer, #plot g.infolayer')];
  const painted_after = layers.length === 2 && layers[0].matches('.cartesianlayer')
      && (layers[0].compareDocumentPosition(layers[1]) & Node.DOCUMENT_POSITION_FOLLOWING) > 0;
  const out = [];
  for (const g of document.querySelectorAll('#plot g.annotation')) {
    const bg = g.querySelector('rect.bg'), t = g.querySelector('text');
    if (!bg || !t) continue;
    const fill = getComputedStyle(bg).fill, opacity = parseFloat(bg.getAttribute('style').match(/fill-opacity: ([0-9.]+)/)?.[1] ?? '1');
    const b = bg.getBoundingClientRect(), r = t.getBoundingClientRect();
    out.push({text: t.textContent, fill, opacity, covers: b.left <= r.left && b.right >= r.right
              && b.top <= r.top + 1 && b.bottom >= r.bottom - 1, painted_after});
  }
  return out;
}"""


def test_the_accepted_paths_labels_are_boxes_over_its_line(page):
    n, text, parents, depths, accepted = next(tree_cases())
    fig = treeplot.tree_figure(text, parents, depths, [0.5] * len(parents), accepted, DrafterLayout(),
                               [" of"] * (len(accepted) + 1), title="Draft tree")
    overlaps(page, fig, FULL[1280])
    boxes = [b for b in page.evaluate(BOXED_LABELS) if not b["text"].startswith(("✓", "✗", "target"))]
    assert len(boxes) == len(accepted) + 1, boxes  # every node of the path, and the root
    for box in boxes:
        assert box["fill"] == "rgb(255, 255, 255)" and box["opacity"] >= 0.9, box
        assert box["covers"] and box["painted_after"], box
