"""The app's pure parts: token text, HTML rendering (escaping, colours by head,
rejected ghosts, hover titles), the figures, input checks, and the race/replay
and walkthrough logic on a tiny random target. No browser, no real model."""
from __future__ import annotations

import dataclasses
import html as html_module
import json
import os
import re
import threading

import pytest

from app.core.forms import DEVICE_TREE, MAX_PROMPT_CHARS, RaceForm, parse_request
from app.core.jobs import Runs, in_background
from app.models.hub import ModelHub, Resolved, _random_drafter
from app.race.replay import replay_frames
from app.race.run import compute_race
from app.race.summary import summary
from app.views import figures, palette
from app.views.records import Detokenizer, DrafterLayout, RaceResult, record, step_views
from app.views.render import esc, render_legend, render_result, render_stats, render_steps, visible
from app.walkthrough import treeplot
from app.walkthrough.acceptance_panel import acceptance_panel
from app.walkthrough.steps import (
    PAPER_TREE,
    PLAY_INTERVAL_S,
    RACE_TREE,
    TREE_CHOICES,
    WALK_TREE,
    Walk,
    WalkStep,
    choices_table,
    compute_walk,
    step_figure,
    step_header,
    text_so_far,
    walk_request,
)
from app.walkthrough.summary import walk_summary
from gumiho import EmittedToken, GenerationSettings, GumihoError, RejectedToken, StepEvent, TreeSettings, stream
from gumiho.bench.machine_load import LoadReading
from helpers import OracleDrafter, ready_hub, tiny_target

END = 300  # the toy tokenizer's special "end" token


class ByteTokenizer:
    """Token id < 256 is that byte; END is a special token. Decoding joins the
    bytes and decodes UTF-8 with replacement, like a byte-level BPE tokenizer."""

    all_special_ids = [END]
    chat_template = None

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        out, buf = [], bytearray()
        for i in ids:
            i = int(i)
            if i == END:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
                if not skip_special_tokens:
                    out.append("<|end|>")
            elif 0 <= i < 256:
                buf.append(i)
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def __call__(self, text):
        return {"input_ids": list(text.encode("utf-8"))}


def b(s: str) -> list[int]:
    return list(s.encode("utf-8"))


TOK = ByteTokenizer()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LAYOUT = DrafterLayout(serial_positions=2, max_depth=7)


def ev(step, emitted, rejected=(), accepted=None, t=0.1, reason=None):
    em = [EmittedToken(tok, pos, head, prob) for tok, pos, head, prob in emitted]
    rej = [RejectedToken(tok, pos, head, prob) for tok, pos, head, prob in rejected]
    acc = accepted if accepted is not None else sum(1 for e in em if e.head != "target")
    return StepEvent(step=step, emitted=em, accepted_length=acc, rejected=rej, drafted=8, draft_s=0.01,
                     verify_s=0.02, elapsed_s=t, finished=reason is not None, finish_reason=reason,
                     copied_positions=[e.position for e in em if e.head == "copy"])


def synthetic_events():
    """prefill 'H'; step 1: serial 'i', serial ' ', mlp 'y', bonus 'o' with rejected 'X' (mlp, position 3)
    and '<' ; step 2: the two bytes of 'é' split over serial + bonus; step 3: end."""
    e_acute = b("é")
    return [
        ev(0, [(ord("H"), 0, "target", None)], t=0.05),
        ev(1, [(ord("i"), 1, "serial", 0.9), (ord(" "), 2, "serial", 0.8), (ord("y"), 3, "mlp", 0.5),
               (ord("o"), 0, "target", None)],
           rejected=[(ord("X"), 4, "mlp", 0.3), (ord("<"), 4, "mlp", 0.1)], t=0.15),
        ev(2, [(e_acute[0], 1, "serial", 0.7), (e_acute[1], 0, "target", None)],
           rejected=[(ord("Q"), 2, "serial", 0.2)], t=0.25),
        ev(3, [(END, 0, "target", None)], t=0.3, reason="eos"),
    ]


# ----------------------------------------------------------------------------- token text


def test_detokenizer_holds_split_characters_until_complete():
    d = Detokenizer(TOK)
    coffee = b("☕")  # 3 bytes
    assert [d.push(x) for x in b("a ")] == ["a", " "]
    assert d.push(coffee[0]) == ""
    assert d.push(coffee[1]) == ""
    assert d.push(coffee[2]) == "☕"
    assert d.push(ord("!")) == "!"
    assert d.push(END) == "<|end|>"


def test_step_views_fold_split_character_into_completing_token():
    views = step_views(synthetic_events(), TOK, b("prompt"))
    texts = [[t.text for t in v.tokens] for v in views]
    assert texts == [["H"], ["i", " ", "y", "o"], ["é"], ["<|end|>"]]
    e = views[2].tokens[0]
    assert e.covers == 2 and e.head == "target"  # the token that completed the character
    assert views[3].tokens[0].special
    assert [r.text for r in views[1].rejected] == ["X", "<"]


def test_non_ascii_and_emoji_survive_a_whole_run():
    text = "Grüße, 世界 🦊!"
    events = [ev(0, [(x, 0, "target", None)], t=0.01 * (i + 1)) for i, x in enumerate(b(text))]
    views = step_views(events, TOK)
    assert "".join(t.text for v in views for t in v.tokens) == text
    html = render_steps(views, None)
    assert re.sub(r"<[^>]+>", "", html) == text


# ----------------------------------------------------------------------------- escaping


@pytest.mark.parametrize("evil", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '"><b>x</b>',
                                  "${alert(1)}", "{{constructor}}", "`x`", "a & b"])
def test_token_text_is_escaped_never_markup(evil):
    events = [ev(0, [(x, 0, "target", None)], t=0.01 * (i + 1)) for i, x in enumerate(b(evil))]
    html = render_steps(step_views(events, TOK), None)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "${" not in html and "{{" not in html and "`" not in html
    # Every tag in the output is one of ours.
    assert set(re.findall(r"<(/?\w+)", html)) <= {"span", "/span"}
    assert esc(evil).count("<") == 0


def test_escape_covers_attributes():
    assert esc('a"b\'c') == "a&quot;b&#x27;c"
    assert visible(" a\nb\t") == "␣a⏎b⇥"


# ----------------------------------------------------------------------------- colours and ghosts


def spans(html):
    return re.findall(r'<span class="tok ([^"]+)"(?: style="([^"]*)")? title="([^"]*)">([^<]*)</span>', html)


def test_colours_by_head_and_position():
    html = render_steps(step_views(synthetic_events(), TOK), LAYOUT)
    s = {text: (cls, style, title) for cls, style, title, text in spans(html)}
    assert "h-serial p1" in s["i"][0] and "h-serial p2" in s[" "][0]
    assert "h-mlp p3" in s["y"][0]
    assert "h-target" in s["o"][0] and s["o"][1] == ""  # bonus tokens are neutral: no fill
    serial1, serial2, mlp3 = s["i"][1], s[" "][1], s["y"][1]
    assert serial1 != serial2  # a shade per position
    assert serial1 == f"background:{palette.token_background('serial', 0, 2)}"
    assert mlp3 == f"background:{palette.token_background('mlp', 0, 5)}"
    # Hue families: serial blue-ish (b > r), MLP orange-ish (r > b).
    rgb = lambda st: tuple(int(st.split("#")[1][i:i + 2], 16) for i in (0, 2, 4))
    assert rgb(serial1)[2] > rgb(serial1)[0] and rgb(serial2)[2] > rgb(serial2)[0]
    assert rgb(mlp3)[0] > rgb(mlp3)[2]


def test_hover_title_tells_position_head_and_draft_prob():
    html = render_steps(step_views(synthetic_events(), TOK), LAYOUT)
    titles = {text: title for _, _, title, text in spans(html)}
    assert "draft position 1" in titles["i"] and "serial Transformer" in titles["i"] and "0.900" in titles["i"]
    assert "draft position 3" in titles["y"] and "MLP head 1" in titles["y"] and "0.500" in titles["y"]
    assert "bonus" in titles["o"]
    assert "2 tokens make up this character" in titles["é"]


def test_rejected_ghosts_only_on_demand_and_before_the_bonus():
    views = step_views(synthetic_events(), TOK)
    plain = render_steps(views, LAYOUT)
    assert "ghost" not in plain
    html = render_steps(views, LAYOUT, show_rejected=True)
    ghosts = re.findall(r'<s class="ghost ([^"]+)"[^>]*title="([^"]*)">([^<]*)</s>', html)
    assert [(g[2]) for g in ghosts] == ["X", "&lt;", "Q"]
    assert "h-mlp p4" in ghosts[0][0] and "rejected draft" in ghosts[0][1]
    # Step 1's place is marked between its accepted drafts and its bonus token; its ghosts
    # follow the word they were rejected in ("yoé", ended by the special token), never inside it.
    flat = re.sub(r'<span class="ghost-at"[^>]*></span>', "^", html)
    flat = html_module.unescape(re.sub(r"<[^>]+>", "", flat))
    assert flat.index("y") < flat.index("^") < flat.index("o") < flat.index("é") < flat.index("X")
    assert flat.index("X") < flat.index("Q") < flat.index("<|end|>") and "y^o^é" in flat
    # The ghosts are added around the same token spans, never instead of them.
    assert html.count('<span class="tok ') == plain.count('<span class="tok ')


def test_ghosts_never_split_a_word():
    """Issue 41: with "Show rejected drafts" on, "Scattering" read "Sc att oc rad ast attering"."""
    pieces = [("Sc", "target"), ("att", "serial"), ("ering", "target"), (" light", "target")]
    events, t = [], 0.0
    for step, (text, head) in enumerate(pieces):
        t += 0.1
        ids = b(text)
        emitted = [(x, 1 if head == "serial" else 0, head if i == 0 else "target", 0.5) for i, x in enumerate(ids)]
        events.append(ev(step, emitted, rejected=[(ord("o"), 1, "serial", 0.2), (ord("c"), 2, "serial", 0.1)]
                         if step else [], t=t))
    html = render_steps(step_views(events, TOK), LAYOUT, show_rejected=True)
    flat = re.sub(r"<[^>]+>", "", re.sub(r"<span class=\"ghosts\">.*?</s></span>", "#", html))
    assert re.search(r"Scattering#+ light", flat), flat  # every group follows the word, none is inside it


def test_a_wide_tree_shows_its_likeliest_ghosts_and_counts_the_rest():
    """Issue 60: the paper's tree rejects a dozen drafts at one depth, and all of them
    struck through made a wall of ghosts. The likeliest three are shown, the rest counted."""
    rejected = [(ord(c), 3, "mlp", p) for c, p in zip("abcdefghij", (0.05, 0.3, 0.1, 0.2, 0.01, 0.02, 0.03, 0.04,
                                                                    0.06, 0.07))]
    events = [ev(0, [(ord("H"), 0, "target", None)]),
              ev(1, [(ord("i"), 1, "serial", 0.9), (ord("o"), 0, "target", None)], rejected=rejected)]
    html = render_steps(step_views(events, TOK), LAYOUT, show_rejected=True)
    shown = re.findall(r'<s class="ghost [^"]+"[^>]*>([^<]*)</s>', html)
    assert shown == ["b", "d", "c"]  # by draft probability: 0.3, 0.2, 0.1
    more = re.search(r'<span class="ghost-more" title="([^"]*)">\+(\d+)</span>', html)
    assert more and more.group(2) == "7" and "7 more rejected drafts" in more.group(1) and "j" in more.group(1)


def test_punctuation_drafts_are_padded_not_slivers():
    events = [ev(0, [(ord("H"), 0, "target", None)]),
              ev(1, [(ord(","), 1, "serial", 0.9), (ord("a"), 2, "serial", 0.8), (ord("."), 0, "target", None)])]
    s = {text: cls for cls, _, _, text in spans(render_steps(step_views(events, TOK), LAYOUT))}
    assert "narrow" in s[","] and "narrow" not in s["a"]
    assert "narrow" not in s["."]  # the target's own tokens have no colour box to widen
    css = open(os.path.join(ROOT, "assets", "style.css")).read()
    assert re.search(r"\.tok\.narrow \{ padding: 1px 0\.2em; \}", css)


def test_legend_lists_both_families_and_the_neutral_bonus():
    lg = render_legend(LAYOUT)
    assert lg.count("sw h-serial") == 2 and lg.count("sw h-mlp") == 5
    assert "bonus" in lg and "ghost" in lg
    serial_only = render_legend(DrafterLayout(7, 7, "serial"))
    assert serial_only.count("sw h-serial") == 7 and "h-mlp" not in serial_only
    assert render_legend(None) == ""


# ----------------------------------------------------------------------------- figures


def run_record(label, events, layout=None):
    rec = record(label, events, TOK, [])
    rec.layout = layout  # what record() takes from a drafter's config
    return rec


def test_acceptance_and_histogram_figures_from_stats():
    g = run_record("gumiho", synthetic_events(), LAYOUT)
    st = g.stats()
    assert st.verify_steps == 3 and st.accepted_hist[:4] == [1, 1, 0, 1]
    fig = figures.acceptance_figure(st, LAYOUT)
    names = [t["name"] for t in fig.data]
    assert any(n.startswith("unconditional") for n in names) and any(n.startswith("conditional") for n in names)
    unc = next(t for t in fig.data if t["name"].startswith("unconditional"))
    cond = next(t for t in fig.data if t["name"].startswith("conditional"))
    assert unc["y"] == pytest.approx([2 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0], abs=1e-4)
    assert cond["y"] == pytest.approx([2 / 3, 1 / 2, 1, 0, 0, 0, 0], abs=1e-4)
    assert len(set(unc["marker"]["color"])) == 7  # a colour per position
    assert "Acceptance by draft position (3 verify steps)" == fig.layout["title"]["text"]
    hist = figures.accepted_length_figure(st, LAYOUT)
    assert hist.data[0]["y"] == [1, 1, 0, 1, 0, 0, 0, 0]
    empty = figures.acceptance_figure(None, None)
    assert empty.layout["annotations"][-1]["text"] == "no verify steps yet"


def test_speed_figure_has_both_columns():
    v = run_record("vanilla", [ev(i, [(65, 0, "target", None)], t=0.1 * (i + 1)) for i in range(5)])
    g = run_record("gumiho", synthetic_events(), LAYOUT)
    fig = figures.speed_figure(v.series(), g.series(), 0.5)
    assert [t["name"] for t in fig.data] == ["vanilla", "Gumiho"]
    assert fig.data[0]["y"] == pytest.approx([10.0] * 5)
    assert fig.data[1]["y"][-1] == pytest.approx(8 / 0.3, abs=1e-3)  # 1 + 4 + 2 + 1 tokens
    # One colour, one meaning (issue 60): a decoder's line is never a head's colour.
    heads = {palette.plot_colour(h, r, n) for h in ("serial", "mlp", "copy") for n in range(1, 8) for r in range(n)}
    assert not {t["line"]["color"] for t in fig.data} & heads


def test_figures_are_plotly_json_that_gr_plot_accepts():
    import gradio as gr
    import plotly.graph_objects as go

    fig = figures.acceptance_figure(run_record("gumiho", synthetic_events(), LAYOUT).stats(), LAYOUT)
    out = gr.Plot().postprocess(fig)
    assert out.type == "plotly" and json.loads(out.plot) == json.loads(fig.to_json())
    go.Figure(json.loads(fig.to_json()))  # a valid plotly figure (plotly's validators accept it)


def test_tree_figure_highlights_accepted_path_and_escapes_labels():
    texts = ["root", "<b>", " a", "x", "y"]
    fig = treeplot.tree_figure(texts, [-1, 0, 0, 1, 3], [0, 1, 1, 2, 3], [1, .6, .3, .5, .4], [1, 3], LAYOUT,
                              ["<b>", "x", "z"])
    nodes = fig.trace("nodes")
    # The accepted path's labels are boxes over its thick line (issue 60: the line ran through
    # them), at their nodes; the other nodes carry their own text.
    boxed = {(a["x"], a["y"]): a for a in fig.layout["annotations"] if a.get("yref") == "y"}
    label = boxed[(nodes["x"][1], nodes["y"][1])]
    assert label["text"] == "<b>&lt;b&gt;</b>"  # accepted: bold, and the token's own "<b>" escaped
    assert label["bgcolor"].startswith("rgba(255,255,255") and label["xanchor"] == "left" and label["xshift"] > 0
    assert len(boxed) == 3 and nodes["text"][0] == nodes["text"][1] == nodes["text"][3] == ""  # root and path
    assert nodes["text"][2] == "␣a"  # rejected: plain; the column says the head, not every node
    # The columns are headed by their proposers: S1, S2 = serial steps, M1 = the first MLP head.
    ticks = fig.layout["xaxis"]["ticktext"]
    assert ticks[0] == "root" and "<b>S1</b> serial step 1" in ticks[1] and "<b>S2</b>" in ticks[2]
    assert "<b>M1</b> MLP head 1" in ticks[3]
    assert "serial step" in nodes["hovertext"][1] or "serial Transformer (step 1)" in nodes["hovertext"][1]
    colours = nodes["marker"]["color"]
    assert colours[2] == palette.REJECTED_PLOT and colours[4] == palette.REJECTED_PLOT  # rejected: grey
    assert colours[1] == palette.plot_colour("serial", 0, 2) and colours[3] == palette.plot_colour("serial", 1, 2)
    assert fig.trace("accepted path")["line"]["color"] == palette.ACCEPT_EDGE
    # The target's choice per depth: ticked along the path, crossed where it broke (a drafted "y" was there).
    assert [a["text"] for a in fig.layout["annotations"] if a.get("yref") == "paper"] == [
        "✓ target:<br><b>&lt;b&gt;</b>", "✓ target:<br><b>x</b>", "✗ target (bonus):<br><b>z</b>"]
    assert "rejected: the target chose z here" in nodes["hovertext"][4]
    assert "discarded" in nodes["hovertext"][2] or "rejected" in nodes["hovertext"][2]
    # Every depth's column is shaded in its family's hue: blues, then oranges.
    bands = [sh["fillcolor"] for sh in fig.layout["shapes"] if sh["type"] == "rect"]
    assert bands == [palette.token_background("serial", 1, 2)] * 2 + [palette.token_background("mlp", 4, 5)]
    pos = treeplot.tree_positions([-1, 0, 0, 1, 3])
    assert pos[0][0] == 0 and pos[4][0] == 3
    # A tree that ended on the path: its bonus is no rejection.
    ended = treeplot.tree_figure(texts[:2], [-1, 0], [0, 1], [1, .6], [1], LAYOUT, ["<b>", "q"])
    assert ended.layout["annotations"][-1]["text"] == "target (bonus):<br><b>q</b>"


def test_tree_figure_and_heads_of_a_tree_with_copied_nodes():
    """A third proposer: the tree says who proposed each node (``DraftTree.heads``, the
    events carry it); the drafter's heads say who drafts a depth no node speaks for."""
    depths = [0, 1, 2, 3, 1, 2]
    assert [LAYOUT.family_at(d) for d in depths] == ["root", "serial", "serial", "mlp", "serial", "serial"]
    heads = ["target", "serial", "serial", "mlp", "copy", "copy"]  # as the tree records them
    assert LAYOUT.family_at(9) == "copy"  # deeper than any drafter head
    fig = treeplot.tree_figure(["r", "a", "b", "c", "x", "y"], [-1, 0, 1, 2, 0, 4], depths, [1, .5, .5, .5, 0, 0],
                              [4, 5], LAYOUT, ["x", "y", "z"], heads=heads)
    nodes = fig.trace("nodes")
    assert nodes["marker"]["symbol"][4] == "diamond" and nodes["marker"]["symbol"][1] == "circle"
    assert nodes["marker"]["color"][4] == palette.COPY_PLOT  # accepted copied node: its own hue
    assert treeplot.drawn_labels(fig)[4] == "<b>x</b> <i>C</i>"  # in a serial column, a copied node says so
    assert "copied from the context" in nodes["hovertext"][4] and "no draft probability" in nodes["hovertext"][4]
    ticks = fig.layout["xaxis"]["ticktext"]
    assert "S1" in ticks[1] and "<b>C</b> copy" in ticks[1]  # both proposers of depth 1


# ----------------------------------------------------------------------------- stats, speedup, replay


def race_of(v_events, g_events, temperature=0.0):
    return RaceResult(3, run_record("vanilla", v_events), run_record("gumiho", g_events, LAYOUT),
                      temperature=temperature)


def test_stats_and_speedup():
    v_events = [ev(i, [(65 + i, 0, "target", None)], t=0.1 * (i + 1)) for i in range(7)]
    g_events = [ev(0, [(65, 0, "target", None)], t=0.1),
                ev(1, [(66, 1, "serial", .9), (67, 2, "serial", .9), (68, 3, "mlp", .9), (69, 0, "target", None)],
                   t=0.2),
                ev(2, [(70, 1, "serial", .9), (71, 0, "target", None)], t=0.35, reason="length")]
    res = race_of(v_events, g_events)
    html = render_result(res)
    assert "Speedup 2.00×" in html and "identical" in html
    cells = render_stats(res.gumiho)
    assert ">2.33<" in cells and ">3<" in cells  # tau 7/3, three target forwards
    mid = render_stats(res.vanilla, 3, 0.3)
    assert ">10.0<" in mid and "0.30 s" in mid
    # Sampled, the texts differ, and the result line says why (issue 60).
    sampled = render_result(race_of(v_events, g_events, temperature=0.8))
    assert "each column samples its own text" in sampled and "identical" not in sampled


def test_the_race_names_a_busy_machine_in_its_result_and_json():
    def busy(share):
        return LoadReading(seconds=5.0, cpus=2, others_share=share, own_share=0.4, steal_share=0.0, load_average=3.5)

    v_events = [ev(i, [(65 + i, 0, "target", None)], t=0.1 * (i + 1)) for i in range(3)]
    g_events = [ev(0, [(65, 0, "target", None)], t=0.1),
                ev(1, [(66, 1, "serial", .9), (67, 0, "target", None)], t=0.2, reason="length")]
    quiet, loaded = race_of(v_events, g_events), race_of(v_events, g_events)
    quiet.machine, loaded.machine = busy(0.02), busy(0.5)
    assert "gm-busy" not in render_result(quiet) and summary(quiet, "p")["machine_note"] == ""
    assert summary(quiet, "p")["machine"]["busy"] is False
    html = render_result(loaded)
    assert "gm-busy" in html and "cannot be trusted" in html and "50%" in html
    answer = summary(loaded, "p")
    assert answer["machine"]["busy"] and answer["machine"]["others_share"] == 0.5
    assert "cannot be trusted" in answer["machine_note"]


def test_replay_frames_follow_recorded_timestamps():
    v_events = [ev(i, [(65, 0, "target", None)], t=0.1 * (i + 1)) for i in range(4)]
    res = race_of(v_events, synthetic_events())
    clock = [0.0]

    def sleep(s):
        clock[0] += max(s, 0.001)

    frames = list(replay_frames(res, threading.Event(), sleep=sleep, now=lambda: clock[0]))
    assert frames[-1].final and frames[-1].n_vanilla == 4 and frames[-1].n_gumiho == 4
    for f in frames:
        assert f.n_vanilla == sum(1 for e in v_events if e.elapsed_s <= f.clock)
    assert all(a.clock <= b.clock for a, b in zip(frames, frames[1:]))
    stop = threading.Event()
    stop.set()
    first = next(iter(replay_frames(res, stop, sleep=sleep, now=lambda: clock[0])))
    assert first.final


def test_runs_registry_stop_and_end():
    runs = Runs(limit=3)
    a = runs.new()
    assert runs.stop(a) and runs.get(a).stop.is_set()
    runs.end(a)
    assert runs.get(a) is None and not runs.stop(a) and not runs.stop(None)
    ids = [runs.new() for _ in range(5)]
    assert len(runs) == 3 and runs.get(ids[-1]) is not None


def test_in_background_yields_progress_then_result_and_raises_errors():
    import asyncio
    import time
    from concurrent.futures import ThreadPoolExecutor

    def slow():
        time.sleep(0.1)
        return 42

    def bad():
        raise GumihoError("bad")

    async def collect(gen):
        return [item async for item in gen]

    with ThreadPoolExecutor(1) as pool:
        out = asyncio.run(collect(in_background(slow, pool.submit, poll_s=0.01)))
        assert out[-1] == 42 and out[0] is None  # progress ticks, then the result
        with pytest.raises(GumihoError):
            asyncio.run(collect(in_background(bad, pool.submit, poll_s=0.01)))

        # A caller that goes away (the generator closed) stops the work.
        async def close_early(stop):
            gen = in_background(slow, pool.submit, stop=stop, poll_s=0.01)
            await gen.__anext__()
            await gen.aclose()

        stop = threading.Event()
        asyncio.run(close_early(stop))
        assert stop.is_set()


# ----------------------------------------------------------------------------- input checks


def ok_args(**kw):
    args = dict(prompt="hi", max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0, depth=6, top_k=4, budget=20)
    args.update(kw)
    return args


@pytest.mark.parametrize("kw, match", [
    (dict(prompt=""), "prompt is empty"),
    (dict(prompt="   \n"), "prompt is empty"),
    (dict(prompt=None), "prompt is empty"),
    (dict(prompt="x" * 100_000), f"at most {MAX_PROMPT_CHARS:,}"),
    (dict(max_new_tokens=0), "Max new tokens must be a whole number from 1"),
    (dict(max_new_tokens=10**9), "Max new tokens must be"),
    (dict(max_new_tokens=2.5), "whole number"),
    (dict(max_new_tokens="lots"), "must be a number"),
    (dict(max_new_tokens=None), "missing"),
    (dict(temperature=-1), "Temperature must be between 0 and 2"),
    (dict(temperature=7), "Temperature must be between 0 and 2"),
    (dict(temperature=float("nan")), "finite"),
    (dict(top_p=0), "Top-p"),
    (dict(top_p=1.5), "Top-p"),
    (dict(depth=0), "Tree depth"),
    (dict(budget=10**6), "Tree node budget"),
    (dict(seed=-3), "Seed"),
])
def test_bad_input_gives_clear_messages(kw, match):
    a = ok_args(**kw)
    with pytest.raises(GumihoError, match=match):
        parse_request(RaceForm(a["prompt"], a["max_new_tokens"], a["temperature"], a["top_p"], a["seed"], a["depth"], a["top_k"], a["budget"]))


def test_good_input_makes_settings():
    req = parse_request(RaceForm("Grüße 🦊 <script>", 16.0, 0.7, 0.9, None, 5, 3, 12, "serial", " org/model ", ""))
    assert req.settings.max_new_tokens == 16 and req.settings.temperature == 0.7 and req.settings.seed == 0
    assert req.settings.tree.depth == 5 and req.settings.tree.total_tokens == 12
    assert req.drafter == "serial" and req.target == "org/model"
    with pytest.raises(GumihoError, match="Unknown drafter"):
        parse_request(RaceForm("hi", 8, 0, 1, 0, 6, 4, 20, "medusa"))


# ----------------------------------------------------------------------------- end to end on a tiny target


@pytest.fixture(scope="module")
def tiny_hub():
    target = tiny_target("llama", vocab=320, hidden=32, eos=END, ctx=256, seed=4)  # 40 tokens before EOS
    target.tokenizer = TOK
    prompt = b("Hello there")
    ref = prompt + [t for e in stream(target, prompt, None, GenerationSettings(max_new_tokens=40)) for t in e.tokens]
    oracle = OracleDrafter(ref, 320, corrupt=0.25, siblings=1, seed=3)

    hub = ModelHub(default_loader=lambda: target, warmup=False)
    hub.resolve = lambda *a, **k: Resolved(target, oracle, True, "", "oracle drafter")  # scripted drafter
    hub.state = "ready"
    hub._ready.set()
    yield hub, ref
    hub.close()


def test_race_on_tiny_target_is_lossless_and_summarised(tiny_hub):
    hub, ref = tiny_hub
    req = parse_request(RaceForm("Hello there", 40, 0.0, 1.0, 0, 6, 4, 20))
    res = compute_race(hub, req, threading.Event())
    v_tokens = [t for e in res.vanilla.events for t in e.tokens]
    g_tokens = [t for e in res.gumiho.events for t in e.tokens]
    assert v_tokens == g_tokens == ref[len(b("Hello there")):][:len(v_tokens)]
    assert res.gumiho.stats().tau > 1.0
    html = render_steps(res.gumiho.views, res.gumiho.layout)
    assert "h-serial" in html and "h-target" in html
    s = summary(res, "Hello there")
    assert s["ok"] and s["vanilla"]["tokens"] == s["gumiho"]["tokens"] and s["speedup"] is not None
    # The API answer carries the acceptance plot's figures: unconditional acceptance at d
    # is the share of verify steps that accepted d or more draft tokens.
    g = s["gumiho"]
    lengths = [e.accepted_length for e in res.gumiho.events if e.is_verify and e.drafted > 0]
    assert g["verify_steps"] == len(lengths) > 0
    assert len(g["acceptance_by_position"]) == res.gumiho.layout.depth
    for d, share in enumerate(g["acceptance_by_position"], start=1):
        assert share == pytest.approx(sum(n >= d for n in lengths) / len(lengths), abs=1e-4)
    assert g["acceptance_by_position"][0] > 0 and g["copied_acceptance_by_position"] == [0.0] * res.gumiho.layout.depth
    assert "acceptance_by_position" not in s["vanilla"]
    # The cost-aware box: the verify cost is measured on the first race that asks for it.
    target = hub.resolve().target
    assert target.verify_cost is None
    aware = compute_race(hub, parse_request(RaceForm("Hello there", 40, 0.0, 1.0, 0, 6, 4, 20, tree_cost_aware=True)),
                         threading.Event())
    assert [t for e in aware.gumiho.events for t in e.tokens] == v_tokens
    assert target.verify_cost is not None and target.verify_cost.max_tokens == 21


def test_stopped_race_releases_and_says_so(tiny_hub):
    hub, _ = tiny_hub
    stop = threading.Event()
    stop.set()
    res = compute_race(hub, parse_request(RaceForm("Hello there", 40, 0.0, 1.0, 0, 6, 4, 20)), stop)
    assert res.vanilla.stopped and res.gumiho.stopped and not res.gumiho.events
    assert "Stopped" in render_result(res)


def test_walkthrough_on_tiny_target(tiny_hub):
    hub, _ = tiny_hub
    walk = compute_walk(hub, parse_request(RaceForm("Hello there", 20, 0.0, 1.0, 0, 6, 4, 20)))
    assert walk.steps
    i = next(k for k, s in enumerate(walk.steps) if s.accepted_length > 0)
    s = walk.steps[i]
    assert len(s.node_text) == len(s.parents) and len(s.choice_text) == s.accepted_length + 1
    head = step_header(walk, i)
    assert f"Verify step {i + 1} of {len(walk.steps)}" in head
    # The drafter's own expectation: its path probabilities summed over the drafted nodes.
    q = [1.0] * len(s.parents)
    for j in range(1, len(q)):
        q[j] = q[s.parents[j]] * s.probs[j]
    assert s.expected == pytest.approx(sum(q[1:])) and f"expected {s.expected:.2f} of them" in head
    # A step a cost-aware tree cut to the root alone says why nothing was verified.
    bare = dataclasses.replace(walk, steps=[dataclasses.replace(s, node_text=s.node_text[:1], parents=[-1], depths=[0],
                                                                probs=[1.0], accepted=[], drafted=0,
                                                                accepted_length=0, choice_text=s.choice_text[:1])])
    assert "none was verified" in step_header(bare, 0)
    # A fixed tree says nothing of cost; a cost-aware walk names its cap.
    assert walk.cost_aware_cap == 0 and "verify forward on this machine" not in head
    aware = compute_walk(hub, parse_request(RaceForm("Hello there", 20, 0.0, 1.0, 0, 6, 4, 20, tree_cost_aware=True)))
    assert aware.cost_aware_cap == 20
    assert "the best of up to 20 whose chances of acceptance pay" in step_header(aware, i)
    table = choices_table(walk, i)
    assert table.count("✓") == s.accepted_length
    fig = step_figure(walk, i)
    assert fig.data and "Draft tree" in fig.layout["title"]["text"]
    assert 'class="current-step"' in text_so_far(walk, i)


@pytest.fixture(scope="module")
def gumiho_hub():
    """The tiny target with a tiny real Gumiho drafter (random weights: 2 serial
    positions, 5 MLP heads), so the walkthrough's trees are what the engine drafts."""
    target = tiny_target("llama", vocab=320, hidden=32, eos=END, ctx=512, seed=4)
    target.tokenizer = TOK
    hub = ready_hub(target, _random_drafter(target, "gumiho"), "tiny gumiho drafter")
    yield hub
    hub.close()


def test_walkthrough_defaults_to_the_papers_tree_with_every_head(gumiho_hub):
    req = walk_request(RaceForm("Hello there", 12, tree_depth=3, tree_top_k=4, tree_nodes=5), None)  # the race's controls say 5 nodes, depth 3: ignored
    assert req.settings.tree == WALK_TREE and req.settings.temperature == 0
    assert (WALK_TREE.depth, WALK_TREE.total_tokens) == (7, 63) and not WALK_TREE.cost_aware
    walk = compute_walk(gumiho_hub, req)
    assert walk.steps and walk.tree_label == "the paper's tree shape"
    assert (walk.layout.serial_positions, walk.layout.max_depth) == (2, 7)
    for s in walk.steps:
        assert max(s.depths) == 7 and s.drafted > 40  # every step reaches the last MLP head
        assert s.heads == ["root"] + ["serial" if d <= 2 else "mlp" for d in s.depths[1:]]
        assert sum(1 for d in s.depths if d >= 4) >= 5
    i = 0
    table = choices_table(walk, i)
    rows = re.findall(r'<tr data-depth="(\d+)" data-head="(\w+)" data-state="(\w+)"[^>]*>(.*?)</tr>', table)
    assert [int(r[0]) for r in rows] == list(range(1, 8))  # every depth of the tree has its row
    for depth, head, state, cells in rows:
        d = int(depth)
        if d <= 2:
            assert head == "serial" and f"serial Transformer (step {d})" in cells
        else:
            assert head == "mlp" and f"MLP head {d - 2}" in cells
    s = walk.steps[i]
    assert [r[2] for r in rows][:s.accepted_length] == ["accepted"] * s.accepted_length
    assert rows[s.accepted_length][2] in ("broke", "bonus")
    assert all(r[2] == "unchecked" for r in rows[s.accepted_length + 1:])
    assert 'data-max-depth="7"' in table
    head = step_header(walk, i)
    assert "by the serial Transformer and the parallel MLP heads (up to depth 7" in head
    fig = step_figure(walk, i)
    assert "<b>M5</b> MLP head 5" in fig.layout["xaxis"]["ticktext"][7]
    assert f"{s.drafted} drafted tokens" in fig.layout["title"]["text"]


def test_walkthrough_race_tree_switch_gives_the_races_settings(gumiho_hub):
    race = parse_request(RaceForm("Hello there", 12, 0.0, 1.0, 0, 3, 2, 5, tree_cost_aware=True)).settings.tree
    req = walk_request(RaceForm("Hello there", 12, tree_depth=3, tree_top_k=2, tree_nodes=5, tree_cost_aware=True), RACE_TREE)
    assert req.settings.tree == race and req.settings.tree != WALK_TREE
    walk = compute_walk(gumiho_hub, walk_request(RaceForm("Hello there", 12, tree_depth=3, tree_top_k=2, tree_nodes=5, tree_cost_aware=False), RACE_TREE))
    assert walk.tree_label == "the race's tree" and all(max(s.depths) <= 3 and s.drafted <= 5 for s in walk.steps)
    assert walk_request(RaceForm("Hello there", 12, tree_depth=3, tree_top_k=2, tree_nodes=5), PAPER_TREE).settings.tree == WALK_TREE
    # With the paper's tree the race's controls are not read, so a value the race refuses does not matter;
    # with the race's, it is refused as in the race.
    assert walk_request(RaceForm("Hello there", 12, tree_depth=99, tree_top_k=2, tree_nodes=5), PAPER_TREE).settings.tree == WALK_TREE
    with pytest.raises(GumihoError, match="Tree depth"):
        walk_request(RaceForm("Hello there", 12, tree_depth=99, tree_top_k=2, tree_nodes=5), RACE_TREE)
    with pytest.raises(GumihoError, match="Unknown tree"):
        walk_request(RaceForm("Hello there", 12, tree_depth=3, tree_top_k=2, tree_nodes=5), "huge")
    with pytest.raises(GumihoError, match="Max new tokens"):
        walk_request(RaceForm("Hello there", 1000, tree_depth=3, tree_top_k=2, tree_nodes=5), PAPER_TREE)
    assert [v for _, v in TREE_CHOICES] == [PAPER_TREE, RACE_TREE]


def test_walkthrough_tab_offers_the_tree_choice_and_a_paused_autoplay():
    from app.web import layout

    comps = layout.build_app(ModelHub(default_loader=lambda: None)).config["components"]
    radio = next(c for c in comps if c.get("props", {}).get("elem_id") == "gm-walk-tree-choice")
    assert radio["props"]["value"] == PAPER_TREE
    assert [c[1] for c in radio["props"]["choices"]] == [PAPER_TREE, RACE_TREE]
    timers = [c["props"] for c in comps if c.get("type") == "timer"]
    assert any(t["value"] == PLAY_INTERVAL_S and t.get("active") is False for t in timers)
    play = next(c for c in comps if c.get("props", {}).get("elem_id") == "gm-walk-play")
    assert play["props"]["value"] == layout.PLAY and play["props"]["interactive"] is False


def test_choices_table_names_copied_nodes():
    walk = Walk(LAYOUT, [], [WalkStep(1, ["r", "a", "b", "c"], [-1, 0, 1, 2], [0, 1, 2, 3], [1, .5, 0, 0],
                                      [False] * 4, [1, 2], [7, 8, 9], ["a", "b", "z"], 3, 2, 0.5,
                                      heads=["root", "serial", "copy", "copy"])])
    table = choices_table(walk, 0)
    assert 'data-depth="2" data-head="copy" data-state="accepted"' in table
    assert "copied from the context" in table and "<code>b</code> copy" in table
    assert "from the serial Transformer and copies from the context" in step_header(walk, 0)


def test_tree_settings_reach_the_engine():
    # A sanity check that the app's tree controls build valid engine settings.
    req = parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5))
    assert isinstance(req.settings.tree, TreeSettings) and req.settings.tree.validate()
    assert (req.settings.tree.depth, req.settings.tree.serial_top_k, req.settings.tree.total_tokens) == (3, 2, 5)
    assert req.settings.tree.cost_aware == DEVICE_TREE.cost_aware  # left out: the device's default
    assert parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5, tree_cost_aware=False)).settings.tree.cost_aware is False
    assert parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5, tree_cost_aware="true")).settings.tree.cost_aware is True
    with pytest.raises(GumihoError, match="Size trees by measured cost must be true or false"):
        parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5, tree_cost_aware="maybe"))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads Linux /proc")
def test_memory_flat_over_fifty_generations_and_after_stops(tiny_hub):
    hub, _ = tiny_hub
    req = parse_request(RaceForm("Hello there", 40, 0.0, 1.0, 0, 6, 4, 20))
    for _ in range(40):  # warm-up: allocator pools and per-shape kernel caches fill, then stay
        compute_race(hub, req, threading.Event())
    base = _rss_mb()
    for i in range(50):
        stop = threading.Event()
        if i % 5 == 0:
            stop.set()  # a stopped generation must release what it held too
        res = compute_race(hub, req, stop)
        del res
    assert _rss_mb() - base < 4, f"memory grew {_rss_mb() - base:.1f} MB over 50 races"


# ----------------------------------------------------------------------------- the copy proposer


def test_copied_tokens_have_their_own_hue_legend_and_title():
    lay = DrafterLayout(serial_positions=2, max_depth=7, copy=8)
    events = [ev(0, [(ord("H"), 0, "target", None)], t=0.05),
              ev(1, [(ord("i"), 1, "serial", 0.9), (ord("!"), 2, "copy", 0.0), (ord("?"), 0, "target", None)],
                 rejected=[(ord("Z"), 3, "copy", 0.0)], t=0.1)]
    views = step_views(events, TOK)
    html = render_steps(views, lay, show_rejected=True)
    copied = [(cls, style, title) for cls, style, title, _ in spans(html) if "h-copy" in cls]
    assert copied and palette.COPY_BG in copied[0][1] and "copied from the context" in copied[0][2]
    assert 'class="ghost tok h-copy' in html and palette.COPY_PLOT in html  # the rejected copy, in green
    assert "Copied" in render_legend(lay) and "Copied" not in render_legend(LAYOUT)
    st = run_record("gumiho", events, lay).stats()
    assert st.accepted_by_head == {"serial": 1, "copy": 1}
    assert st.copied_by_position == [0, 1]  # the copied "!" was accepted at draft position 2
    fig = figures.acceptance_figure(st, lay)
    # The bar at position 2 is the copy proposer's, not the MLP head's or the serial step's.
    drafter_part, copied_part = fig.data[0], fig.data[1]
    assert fig.layout["barmode"] == "stack" and copied_part["name"].endswith("copied from the context")
    # The axis ends where the heads end (7): nothing was copied beyond them.
    assert drafter_part["x"] == list(range(1, 8))
    assert drafter_part["y"][:2] == [1.0, 0.0] and copied_part["y"][:2] == [0.0, 1.0]
    assert copied_part["marker"]["color"] == palette.COPY_PLOT
    # Without copied tokens the figure keeps one bar trace.
    plain = figures.acceptance_figure(run_record("gumiho", synthetic_events(), LAYOUT).stats(), LAYOUT)
    assert [t["type"] for t in plain.data] == ["bar", "scatter"] and "barmode" not in plain.layout


def test_copy_from_context_reaches_the_race_and_the_walkthrough(monkeypatch):
    from app.core.forms import COPY_DEFAULT

    target = tiny_target("llama", vocab=320, hidden=32, eos=END, ctx=512, seed=4)
    target.tokenizer = TOK
    drafter = _random_drafter(target, "gumiho")
    hub = ModelHub(default_loader=lambda: target, warmup=False)
    hub.default, hub.state = target, "ready"
    hub._ready.set()
    monkeypatch.setattr(hub, "_drafter_for", lambda *a: (drafter, True, "test"))
    prompt = "one two three, one two three, one two"
    plain = compute_race(hub, parse_request(RaceForm(prompt, 30, 0.0, 1.0, 0, 3, 2, 5, copy_from_context=False)), threading.Event())
    copying = compute_race(hub, parse_request(RaceForm(prompt, 30, 0.0, 1.0, 0, 3, 2, 5, copy_from_context=True)), threading.Event())
    tokens = [t for e in plain.vanilla.events for t in e.tokens]
    assert [t for e in copying.gumiho.events for t in e.tokens] == tokens == \
        [t for e in plain.gumiho.events for t in e.tokens]
    assert plain.gumiho.layout.copy == 0 and copying.gumiho.layout.copy > 0
    assert "copying from the context" in copying.notes[0] and "copying" not in plain.notes[0]
    assert sum(e.copy_nodes for e in copying.gumiho.events) > 0  # the prompt repeats: copy nodes were drafted
    walk = compute_walk(hub, walk_request(RaceForm(prompt, 12, tree_depth=3, tree_top_k=2, tree_nodes=5, copy_from_context=True), RACE_TREE))
    assert walk.layout.copy > 0 and any("copy" in s.heads for s in walk.steps)
    assert parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5)).copy_from_context is COPY_DEFAULT
    with pytest.raises(GumihoError, match="Copy from the context must be true or false"):
        parse_request(RaceForm("x", 4, 0, 1, 0, 3, 2, 5, copy_from_context="sometimes"))


def test_a_punctuation_token_reads_the_same_in_the_tree_and_the_table():
    """Issue 60: a comma drafted showed as "‹,›" in the tree and ", , 0.42" in the
    table. Both now show ‹,›, and the table's candidates are not comma-separated."""
    walk = Walk(LAYOUT, [], [WalkStep(1, ["r", ",", " sea", "."], [-1, 0, 0, 1], [0, 1, 1, 2], [1, .42, .3, .5],
                                      [False] * 4, [1], [7, 8], [",", "."], 3, 1, 0.5,
                                      heads=["root", "serial", "serial", "serial"])])
    table = choices_table(walk, 0)
    assert "<code>‹,›</code> 0.42" in table and "<code>␣sea</code> 0.30" in table
    assert ", ," not in html_module.unescape(re.sub(r"<[^>]+>", "", table))
    assert treeplot.node_label(",") == "‹,›" and treeplot.node_label(" sea") == "␣sea"


def test_the_walkthroughs_text_never_ends_in_half_a_character():
    """Issue 71: a /walkthrough answer could end in U+FFFD (an emoji cut between its byte
    tokens by the token limit); its text, as the race's, ends before the half character."""
    from app.views.records import whole_characters

    class Bytes:  # token id = a byte
        def decode(self, ids, skip_special_tokens=False):
            return bytes(ids).decode("utf-8", errors="replace")

    tokens = list("Sun 🌞".encode("utf-8"))
    assert Bytes().decode(tokens[:-1]).endswith("\ufffd")  # what the answer's text was
    for cut in (1, 2, 3):
        assert whole_characters(Bytes(), tokens[:-cut]) == "Sun "
    assert whole_characters(Bytes(), tokens) == "Sun 🌞"


def test_the_legend_explains_the_token_notation():
    """Issue 71: the page wrote ␣ for a space and ‹,› around punctuation without saying so."""
    from app.views.records import DrafterLayout
    from app.views.render import render_legend, token_mark, visible

    legend = render_legend(DrafterLayout(tree_depth=3))
    assert visible(" ") in legend and token_mark(",") in legend and "a space" in legend


def test_walkthrough_at_temperature_shows_each_checked_nodes_test(gumiho_hub):
    """Issue 70: above temperature 0 the walkthrough samples, and every step carries the
    acceptance test of each node the target checked (kept iff u < min(1, p / q), q = 1 for
    a top-k draft) and the residual its last token was drawn from, on the page and in JSON."""
    req = walk_request(RaceForm("Hello there", 16, temperature=0.8, seed=3), PAPER_TREE)
    assert req.settings.temperature == 0.8 and req.settings.seed == 3
    walk = compute_walk(gumiho_hub, req)
    assert walk.temperature == 0.8 and walk.steps
    for s in walk.steps:
        assert s.checks and s.residual is not None
        for c in s.checks:
            assert c["rule_q"] == 1.0 and c["accept_prob"] == pytest.approx(min(1.0, c["target_prob"]))
            assert c["accepted"] == (c["uniform"] < c["accept_prob"])
            assert c["text"] == s.node_text[c["node"]]
        kept = [c["node"] for c in s.checks if c["accepted"]]
        assert kept[:s.accepted_length] == s.accepted[:s.accepted_length]
        tops = [t["prob"] for t in s.residual["top"]]
        assert tops == sorted(tops, reverse=True) and sum(tops) == pytest.approx(s.residual["covered"])
        # The rejected children at the break have no mass left in the residual.
        rejected = {c["token"] for c in s.checks
                    if c["parent"] == s.residual["node"] and not c["accepted"]}
        assert not rejected & {t["token"] for t in s.residual["top"]}
    i = next(k for k, s in enumerate(walk.steps) if any(not c["accepted"] for c in s.checks))
    panel = acceptance_panel(walk, i)
    assert "min(1, p / q)" in panel and "classic bug" in panel
    states = re.findall(r'<tr data-node="\d+" data-state="(\w+)"', panel)
    assert states == ["accepted" if c["accepted"] else "rejected" for c in walk.steps[i].checks]
    assert "← drawn" in panel and 'class="walk-residual"' in panel
    answer = walk_summary(walk, "Hello there")
    assert answer["temperature"] == 0.8
    check = answer["steps"][i]["checks"][0]
    assert set(check) >= {"draft_prob", "rule_q", "target_prob", "accept_prob", "uniform", "accepted", "text"}
    assert answer["steps"][i]["residual"]["resampled_token"] == walk.steps[i].residual["resampled_token"]
    json.dumps(answer)  # plain JSON


def test_walkthrough_at_temperature_zero_shows_greedys_test(gumiho_hub):
    walk = compute_walk(gumiho_hub, walk_request(RaceForm("Hello there", 12), PAPER_TREE))
    assert walk.temperature == 0
    for s in walk.steps:
        assert s.residual is None
        for c in s.checks:
            assert c["uniform"] is None and c["accept_prob"] in (0.0, 1.0) and c["accepted"] == (c["accept_prob"] == 1)
            assert c["accepted"] == (c["token"] == s.choices[s.depths[c["node"]] - 1])
    panel = acceptance_panel(walk, 0)
    assert "greedy" in panel and "← drawn" not in panel
