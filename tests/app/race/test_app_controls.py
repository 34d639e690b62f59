"""Small things a teacher meets (issue 76): with the paper's tree chosen, the tree
controls show its values, greyed, and give the sized ones back after; the
walkthrough's Generate button is off while a walk runs."""
from __future__ import annotations

import gradio as gr

from app.core.forms import DEVICE_TREE, PAPER_SHAPE, PAPER_TREE_SETTINGS, SIZED_SHAPE
from app.models.hub import ModelHub
from app.race.settings import PAPER_TREE_HINT, tree_controls
from app.web.layout import build_app

SIZED = {"depth": 3, "top_k": 4, "budget": 5, "cost_aware": True}


def test_the_papers_tree_shows_its_values_and_gives_the_sized_ones_back():
    paper = tree_controls(PAPER_SHAPE, SIZED, None)
    shown = {name: paper[name].value for name in SIZED}
    assert shown == {"depth": PAPER_TREE_SETTINGS.depth, "top_k": PAPER_TREE_SETTINGS.serial_top_k,
                     "budget": PAPER_TREE_SETTINGS.total_tokens, "cost_aware": PAPER_TREE_SETTINGS.cost_aware}
    assert shown != SIZED and all(paper[name].interactive is False for name in SIZED)
    assert all(paper[name].info == PAPER_TREE_HINT for name in SIZED) and "fixed" in PAPER_TREE_HINT
    assert paper["saved"] == SIZED
    # Chosen again (the one-click button sets it once more): the sized values stay kept.
    again = tree_controls(PAPER_SHAPE, shown, paper["saved"])
    assert again["saved"] == SIZED
    back = tree_controls(SIZED_SHAPE, shown, again["saved"])
    assert {name: back[name].value for name in SIZED} == SIZED and back["saved"] is None
    assert all(back[name].interactive is True for name in SIZED)
    assert tree_controls(SIZED_SHAPE, SIZED, None) == {}  # already sized: nothing changes


def dependencies():
    demo = build_app(ModelHub(default_loader=lambda: None))
    config = demo.config
    by_elem = {c["props"].get("elem_id"): c["id"] for c in config["components"] if c["props"].get("elem_id")}
    return demo, config["dependencies"], by_elem


def test_the_tree_choice_drives_the_tree_controls():
    _, deps, by_elem = dependencies()
    shape = by_elem["gm-tree-shape"]
    moved = [d for d in deps if [shape, "change"] in [list(t) for t in d["targets"]]]
    assert len(moved) == 1 and by_elem["gm-budget"] in moved[0]["outputs"] and len(moved[0]["outputs"]) == 5
    assert DEVICE_TREE.depth != PAPER_TREE_SETTINGS.depth  # on a CPU the two trees differ, as the issue saw


def test_the_walkthroughs_button_is_off_while_a_walk_runs():
    demo, deps, by_elem = dependencies()
    button = by_elem["gm-walk-run"]
    first = [d for d in deps if [button, "click"] in [list(t) for t in d["targets"]]]
    # The walk's button off, and Run it live (shown after a recorded walk) hidden, at the press.
    assert len(first) == 1 and first[0]["outputs"] == [button, by_elem["gm-walk-live"]]
    off, live = demo.fns[first[0]["id"]].fn()
    assert isinstance(off, gr.Button) and off.interactive is False and live.visible is False
    walk = [d for d in deps if d.get("trigger_after") == first[0]["id"]]
    assert len(walk) == 1 and button not in walk[0]["outputs"]
    after = [d for d in deps if d.get("trigger_after") == walk[0]["id"]]
    assert len(after) == 1 and after[0]["outputs"] == [button] and not after[0].get("trigger_only_on_success")
    back = demo.fns[after[0]["id"]].fn()
    assert isinstance(back, gr.Button) and back.interactive is False  # the model is not ready: stays off


def test_a_cost_typed_beyond_its_track_passes_gradios_own_processing():
    """Through the page's own event, as Gradio runs it (its preprocess included): a
    verify cost of 25 forwards, beyond the track's 10, is predicted and said, where
    Gradio's slider answered "Error" (issue 76)."""
    import asyncio

    from gradio.state_holder import SessionState

    demo, deps, by_elem = dependencies()
    verify = by_elem["gm-whatif-verify"]
    dep = [d for d in deps if [verify, "change"] in [list(t) for t in d["targets"]]][0]
    inputs = [25 if i == verify else getattr(demo.blocks[i], "value", None) for i in dep["inputs"]]
    out = asyncio.run(demo.process_api(block_fn=demo.fns[dep["id"]], inputs=inputs, state=SessionState(demo)))
    html = out["data"][0]
    assert "Predicted speedup" in html and "Verify 25 lies beyond its slider" in html, html


def test_the_guard_lets_a_figure_beyond_its_track_through_and_nothing_else():
    """The page's events pass the server's guard (app.web.checks) before Gradio: a What if?
    figure typed beyond its track must pass there too, or the page shows "Error" (a 422)
    although the handler would have said it in words."""
    from app.views.sliders import FigureSlider
    from app.web.checks.fields import problem

    with gr.Blocks():
        verify = FigureSlider(0.1, 10, value=1.0)
    assert problem(verify, 25) is None and problem(verify, 2.5) is None
    for wrong in (None, "3", True, [], float("nan")):
        assert problem(verify, wrong) == "a number", wrong
