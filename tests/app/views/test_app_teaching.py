"""What a class sees of the drafter's heads (issue 41): every head the page names is
either drafted or marked as not drafted (legend, colour key, plots, the race's
summary), the paper's deep tree is one click away and says what it costs, and
docs/teaching.md agrees with the page and with the records the README's table is
made from."""
from __future__ import annotations

import html as html_module
import re
import threading

import pytest
from test_app_render import tiny_hub  # noqa: F401  (a fixture)

from app.core.forms import PAPER_SHAPE, PAPER_TREE_SETTINGS, SIZED_SHAPE, RaceForm, parse_request
from app.core.settings import MAX_WAITING
from app.models.hub import ModelHub
from app.race import settings as race_settings
from app.race.run import compute_race
from app.views import figures
from app.views.records import DrafterLayout
from app.views.render import render_legend, render_result
from app.walkthrough import treeplot
from app.web.layout import build_app
from gumiho import TreeSettings
from gumiho.bench.records import SET_NAMES, load, record_speedup
from helpers import ROOT

TEACHING = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_TREE = TreeSettings.for_device("cpu")
CPU_LAYOUT = DrafterLayout(serial_positions=2, max_depth=7, tree_depth=CPU_TREE.depth)


# ----------------------------------------------------------------------------- drafted or marked as not drafted


def test_the_legend_marks_the_positions_the_cpu_tree_does_not_draft():
    html = render_legend(CPU_LAYOUT)
    skipped = range(CPU_TREE.depth + 1, 8)
    for d in skipped:
        swatch = re.search(rf'<span class="sw nd h-mlp p{d}" title="([^"]+)">{d}</span>', html)
        assert swatch and "not drafted" in swatch.group(1) and "on a CPU every drafted token" in swatch.group(1), d
    for d in range(1, CPU_TREE.depth + 1):  # the drafted ones keep their colour
        assert re.search(rf'<span class="sw h-\w+ p{d}" style="background:#', html), d
    assert (f"{skipped[0]}–{skipped[-1]}</span> not drafted: this race's tree stops at depth {CPU_TREE.depth}"
            in html_module.unescape(html))
    assert "Race with the paper's tree" in html
    # The paper's tree (a GPU's, or the button's) drafts every position: nothing is marked.
    assert " nd " not in render_legend(CPU_LAYOUT.with_tree(7)) and "not drafted" not in render_legend(
        CPU_LAYOUT.with_tree(7))
    # The ghosts' toggle is named, not placed ("below" was wrong: it is beside the legend).
    assert "toggle below" not in html and '"Show rejected drafts"' in html


def test_the_acceptance_plot_bands_the_positions_not_drafted():
    fig = figures.acceptance_figure(None, CPU_LAYOUT)
    band = [s for s in fig.layout["shapes"] if s.get("fillcolor") == figures.NOT_DRAFTED_FILL]
    assert len(band) == 1 and (band[0]["x0"], band[0]["x1"]) == (CPU_TREE.depth + 0.5, 7.5)
    notes = [a["text"] for a in fig.layout["annotations"]]
    assert f"not drafted<br>(tree depth {CPU_TREE.depth})" in notes
    # The MLP label names only the head that drafted (position 3), not "MLP heads" over 3-7.
    assert "MLP head 1" in notes and "parallel MLP heads" not in " ".join(notes).lower()
    bars, line = fig.data[0], fig.data[-1]
    assert all(c == "#c8c8c8" for c in bars["marker"]["color"][CPU_TREE.depth:])
    assert line["y"][CPU_TREE.depth:] == [None] * (7 - CPU_TREE.depth)  # no measured-looking zeros
    # The histogram says the same.
    hist = figures.accepted_length_figure(None, CPU_LAYOUT)
    assert any(s.get("fillcolor") == figures.NOT_DRAFTED_FILL for s in hist.layout["shapes"])
    # The paper's tree: no band.
    deep = figures.acceptance_figure(None, CPU_LAYOUT.with_tree(7))
    assert not any(s.get("fillcolor") == figures.NOT_DRAFTED_FILL for s in deep.layout["shapes"])


def test_the_plot_legend_sits_below_the_plot_not_on_its_title():
    fig = figures.acceptance_figure(None, CPU_LAYOUT.with_tree(0))
    legend = fig.layout["legend"]
    assert legend["yanchor"] == "top" and legend["y"] < 0 and fig.layout["margin"]["b"] >= 90
    # In pixels, the legend starts below the ticks and the axis title, inside the bottom margin.
    plot_px = fig.layout["height"] - fig.layout["margin"]["t"] - fig.layout["margin"]["b"]
    assert 80 <= -legend["y"] * plot_px <= fig.layout["margin"]["b"] - 55


def test_a_race_records_its_trees_depth_and_says_what_was_not_drafted(tiny_hub):  # noqa: F811
    hub, _ = tiny_hub
    res = compute_race(hub, parse_request(RaceForm("Hello there", 24, 0.0, 1.0, 0, 3, 2, 5)), threading.Event())
    assert res.gumiho.layout.tree_depth == 3 and res.gumiho.layout.not_drafted() == (4, 5, 6, 7)
    assert "positions 4–7 not drafted (tree depth 3)" in render_result(res)
    deep = compute_race(hub, parse_request(RaceForm("Hello there", 24, 0.0, 1.0, 0, 3, 2, 5, tree_shape=PAPER_SHAPE)),
                        threading.Event())
    assert deep.gumiho.layout.not_drafted() == () and "not drafted" not in render_result(deep)


# ----------------------------------------------------------------------------- the paper's tree, one click away


def test_the_paper_shape_ignores_the_tree_controls():
    req = parse_request(RaceForm("hi", 8, 0.0, 1.0, 0, 99, -4, "x", tree_shape=PAPER_SHAPE))  # controls neither used nor checked
    assert req.settings.tree == PAPER_TREE_SETTINGS
    assert (PAPER_TREE_SETTINGS.depth, PAPER_TREE_SETTINGS.total_tokens) == (7, 63)
    assert parse_request(RaceForm("hi", 8, 0.0, 1.0, 0, 3, 2, 5, tree_shape=SIZED_SHAPE)).settings.tree.depth == 3
    with pytest.raises(Exception, match="Unknown tree"):
        parse_request(RaceForm("hi", 8, 0.0, 1.0, 0, 3, 2, 5, tree_shape="huge"))


def test_the_page_has_the_paper_tree_button_and_says_its_cost():
    config = build_app(ModelHub(default_loader=lambda: None)).config
    props = {c["props"].get("elem_id"): c["props"] for c in config["components"] if c.get("props")}
    assert props["gm-run-paper"]["value"] == "Race with the paper's tree"
    shape = props["gm-tree-shape"]
    assert [v for _, v in shape["choices"]] == [SIZED_SHAPE, PAPER_SHAPE] and shape["value"] == SIZED_SHAPE
    assert "slower than vanilla" in race_settings.paper_tree_note() and "teaching" in race_settings.paper_tree_note()
    # The button chooses the paper's tree, then runs the race's own steps.
    chosen = next(d for d in config["dependencies"] if d["targets"] and any(
        t[0] == next(c["id"] for c in config["components"] if c["props"].get("elem_id") == "gm-run-paper")
        for t in d["targets"]))
    assert chosen["outputs"] == [next(c["id"] for c in config["components"]
                                      if c["props"].get("elem_id") == "gm-tree-shape")]


# ----------------------------------------------------------------------------- teaching.md agrees


def _records():
    paths = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    return {label: rec for label, _, rec in load(paths)}


def test_teaching_md_figures_are_the_records_as_the_readme_prints_them():
    records = _records()
    rows = re.findall(r"^\s*\| ([A-Za-z0-9/ -]+?) \([^)]*\) \| (\d\.\d\d) \| (\d\.\d\d)x \|$", TEACHING, re.M)
    assert len(rows) >= 3, "teaching.md's table of the records"
    for label, tau, speed in rows:
        rec = records[label]
        assert f"{rec['methods']['gumiho']['tau']:.2f}" == tau, label
        assert f"{record_speedup(rec, 'gumiho')[0]:.2f}" == speed, label
        readme_row = re.search(rf"^\| {re.escape(label)} \| (\d\.\d\d) \|.*\| (\d\.\d\d)x \|$", README, re.M)
        assert readme_row and readme_row.groups() == (tau, speed), label  # the README's table says the same
    mt = records[SET_NAMES["mt_bench"]]["methods"]
    said = re.search(r"on MT-Bench, its\s+acceptance at position 1 is (\d\.\d\d) against Gumiho's (\d\.\d\d), and its "
                     r"tau is (\d\.\d\d) against (\d\.\d\d)", TEACHING)
    assert said and said.groups() == (f"{mt['parallel']['acceptance_by_position'][0]:.2f}",
                                      f"{mt['gumiho']['acceptance_by_position'][0]:.2f}",
                                      f"{mt['parallel']['tau']:.2f}", f"{mt['gumiho']['tau']:.2f}")


def test_teaching_md_names_the_pages_controls_and_its_trees():
    config = build_app(ModelHub(default_loader=lambda: None)).config
    words = {str(c["props"].get(k)) for c in config["components"] for k in ("label", "value") if c.get("props")}
    for control in ("Race with the paper's tree", "Show rejected drafts", "Run the race", "Size trees by measured cost",
                    "Generate and step through", "Tree", "Drafter"):
        assert f"*{control}" in TEACHING, control
        assert any(w.startswith(control) for w in words), control
    assert f"the race's own tree stops at depth {CPU_TREE.depth}" in TEACHING
    assert f"positions {CPU_TREE.depth + 1} to 7 as *not drafted*" in TEACHING
    tree = PAPER_TREE_SETTINGS
    assert f"({tree.total_tokens} tokens plus {tree.full_tree_tokens}, depth {tree.depth})" in TEACHING
    assert f"at most {MAX_WAITING} wait" in TEACHING


def test_the_readme_and_app_docs_say_what_the_code_does():
    app_md = (ROOT / "docs" / "app.md").read_text(encoding="utf-8")
    tree = PAPER_TREE_SETTINGS
    assert f"tree stops at depth {CPU_TREE.depth}" in app_md and f"stops at depth\n  {CPU_TREE.depth}" in README
    assert f"positions {CPU_TREE.depth + 1} to 7 as *not drafted*" in app_md
    assert f"({tree.total_tokens} + {tree.full_tree_tokens} nodes, depth {tree.depth})" in app_md
    assert f"at most {MAX_WAITING} runs wait" in app_md and f"{MAX_WAITING} requests are already waiting" in app_md
    assert f"at most {treeplot.TREE_MAX_HEIGHT} px tall" in app_md
