"""The page's look, without a browser (issue 41's visual defects; the screenshots of
tests/app/web/test_app_browser.py show them in a real one): symbols every font draws, the
settings' layout, the walkthrough's tree at a height that fits a screen, and the
walkthrough's progress while it generates."""
from __future__ import annotations

import asyncio
import html
import json
import threading
import time

from test_app_render import TOK

from app.models.hub import ModelHub, _random_drafter
from app.replays import Replays
from app.views.records import DrafterLayout
from app.views.render import render_banner
from app.walkthrough import tab as walk_tab
from app.walkthrough import treeplot
from app.walkthrough.steps import PAPER_TREE
from app.web.layout import build_app, load_examples
from helpers import ready_hub, tiny_target

# What the page itself writes (not the model's text) is drawn from these: characters
# the ordinary fonts of every system carry. Emoji and the technical symbols that
# only emoji fonts have (U+23F8 pause, U+1F98A fox, U+2615 coffee...) show as empty
# boxes elsewhere, as the README's own screenshot did.
COMMON = set(range(0x20, 0x7F)) | set(range(0xA0, 0x180)) | set(range(0x2010, 0x2040)) | \
    set(range(0x2190, 0x2200)) | set(range(0x2200, 0x2270)) | set(range(0x25A0, 0x25D0)) | \
    {ord(c) for c in "✓✗⏎␣⇥∅"}


def page_text() -> str:
    config = build_app(ModelHub(default_loader=lambda: None)).config
    return json.dumps(config, ensure_ascii=False, default=str) + walk_tab.PAUSE + walk_tab.PLAY + \
        render_banner("careful", "warn") + render_banner("failed", "error")


def test_the_page_writes_only_symbols_every_font_draws():
    odd = sorted({c for c in page_text() + "".join(load_examples()) if ord(c) not in COMMON and c not in "\n\t"})
    assert not odd, [f"U+{ord(c):04X} {c}" for c in odd]


def test_the_settings_rows_leave_each_control_room():
    """Six controls in one row cut the drafter menu ("Gumiho (2 serial + 5 MLF") and
    folded the budget's long label into a column eight lines tall."""
    config = build_app(ModelHub(default_loader=lambda: None)).config
    by_id = {c["id"]: c for c in config["components"]}
    controls = ("slider", "checkbox", "dropdown", "radio", "number")
    rows = []  # the input controls of every row (Gradio wraps them in forms inside the row)

    def walk(node):
        found = [node["id"]] if by_id.get(node["id"], {}).get("type") in controls else []
        for k in node.get("children", []):
            found += walk(k)
        if by_id.get(node["id"], {}).get("type") == "row":
            rows.append(found)
        return found

    walk(config["layout"])
    drafter = next(c["id"] for c in config["components"] if c["props"].get("elem_id") == "gm-drafter")
    row = min((r for r in rows if drafter in r), key=len)
    assert len(row) <= 3 and by_id[drafter]["props"]["min_width"] >= 300
    for c in config["components"]:
        label = c["props"].get("label") or ""
        if c["type"] in ("slider", "checkbox", "dropdown", "radio"):
            assert len(label) <= 40, label  # longer words go in the control's info line


def test_the_walkthrough_tree_fits_a_screen_and_keeps_the_labels_a_class_reads():
    # The paper's tree: a chain to depth 7 and a fan of 50 leaves under the root's first child.
    parents, depths = [-1, 0], [0, 1]
    for d in range(2, 8):
        parents.append(len(parents) - 1)
        depths.append(d)
    for k in range(50):
        parents.append(1)
        depths.append(2)
    n = len(parents)
    texts = ["root", "The", " cat"] + ["x"] * 5 + ["," if k == 0 else f"w{k}" for k in range(50)]
    fig = treeplot.tree_figure(texts, parents, depths, [0.5] * n, [1, 2], DrafterLayout(2, 7), ["The", " dog"])
    assert fig.layout["height"] <= treeplot.TREE_MAX_HEIGHT <= 700
    labels = treeplot.drawn_labels(fig)
    assert "The" in labels[1] and "cat" in labels[2]  # the accepted path
    # The candidates competing with the path keep theirs where a label has room: the comma
    # right under " cat" would be drawn over it (rows are ~9 px apart here), the next one is not.
    assert labels[8] == "" and "," in fig.trace("nodes")["hovertext"][8]
    assert labels[9] == "w1" and labels[10] == "" and labels[11] == "w3"
    # Deeper, off the path, alone in its column: room for its label (issue 60: the MLP heads'
    # columns were unlabelled dots beside a crowded serial column).
    assert labels[4] == "x" and "x" in fig.trace("nodes")["hovertext"][4]
    small = treeplot.tree_figure(["r", "a", "b"], [-1, 0, 0], [0, 1, 1], [1, .5, .5], [1], DrafterLayout(2, 7), ["a"])
    assert all(treeplot.drawn_labels(small))  # a small tree labels every node


def test_the_walkthrough_shows_its_progress_while_it_generates():
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=512, seed=5)
    target.tokenizer = TOK
    forward = target.forward

    def slow_forward(*args, **kwargs):
        time.sleep(0.05)
        return forward(*args, **kwargs)

    target.forward = slow_forward
    hub = ready_hub(target, _random_drafter(target, "gumiho"))

    async def outputs():
        values = dict(prompt="Hello there", max_new_tokens=16, walk_tree=PAPER_TREE, temperature=0.0, seed=0,
                      drafter="gumiho", tree_depth=3,
                      tree_top_k=2, tree_nodes=5, target="", drafter_path="", tree_cost_aware=None,
                      copy_from_context=None, tree_shape=None)
        return [out async for out in walk_tab.walk_run(hub, Replays(hub), True, values)]

    seen = asyncio.run(outputs())
    progress = [html.unescape(out["status"]) for out in seen[:-1]]
    assert progress and all("Generating with the paper's tree shape" in p or "Waiting for the model" in p
                            for p in progress), progress
    assert any("of at most 16 tokens" in p for p in progress)
    assert "verify steps for" in seen[-1]["status"] and seen[-1]["walk"] is not None  # then the walk itself


def test_the_race_says_it_is_reading_a_long_prompt():
    """Issue 54, item 4: the longest prompt took a minute to read with nothing on the page.
    The prefill is held until the banner has said so (a real race, its page event)."""
    from app.core.forms import RaceForm, parse_request
    from app.race import tab as race_tab

    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=4096, seed=5)
    target.tokenizer = TOK
    forward, reading, said = target.forward, threading.Event(), threading.Event()

    def held_prefill(tokens, past, *args, **kwargs):
        if past == 0 and len(tokens) > 100:  # reading the prompt (the warm-up's are short)
            reading.set()
            said.wait(20)
        return forward(tokens, past, *args, **kwargs)

    target.forward = held_prefill
    hub = ready_hub(target, _random_drafter(target, "gumiho"))
    prompt = "The river runs past the mill. " * 60  # 1,800 byte tokens
    req = parse_request(RaceForm(prompt, 2, 0.0, 1.0, 0, 3, 2, 4, "gumiho", "", ""), access=hub.access)
    rid = race_tab.RUNS.new()

    async def banners():
        out = []
        async for item in race_tab.race_compute(hub, Replays(hub), True, {"run_id": rid, "request": req}):
            out.append(html.unescape(str(item.get("status"))))
            if "Reading the prompt" in out[-1]:
                said.set()
        return out

    try:
        seen = asyncio.run(banners())
    finally:
        said.set()
        race_tab.RUNS.end(rid)
    assert reading.is_set()
    assert any("Reading the prompt for vanilla decoding: 1,800 tokens…" in b for b in seen), seen
