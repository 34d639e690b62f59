"""Speed predicted beside speed measured (issue 70): the race's result line and JSON,
the Compare table and JSON, and the what-if sliders, on synthetic races; on the
tiny target, a race's predicted tau is its measured one at temperature 0."""
from __future__ import annotations

import re
import threading

import pytest

from app.core.forms import RaceForm, parse_request
from app.race.summary import summary
from app.race.whatif import START_ACCEPTANCE, from_race, monotone, predicted
from app.views.records import RaceResult, record
from app.views.render import render_result
from gumiho import GenerationSettings, TreeSettings, stream, summarize
from gumiho.lab.speedmodel import predicted_run_tau
from helpers import FixedTreeDrafter, ready_hub, tiny_target


class Letters:
    chat_template = None
    all_special_ids = []

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=False):
        return "".join(chr(97 + int(i) % 26) for i in ids)

    def __call__(self, text):
        return {"input_ids": [1 + ord(ch) % 26 for ch in text]}


@pytest.fixture(scope="module")
def target():
    t = tiny_target("llama", vocab=64, hidden=32, eos=63, seed=3)
    t.tokenizer = Letters()
    return t


def race(target, drafter, tokens=24) -> RaceResult:
    ids = [1, 2, 3, 4]
    settings = GenerationSettings(max_new_tokens=tokens, tree=TreeSettings(total_tokens=4, depth=2, serial_top_k=2))
    v = list(stream(target, ids, None, settings))
    g = list(stream(target, ids, drafter, settings))
    return RaceResult(len(ids), record("vanilla", v, target.tokenizer, ids),
                      record("gumiho", g, target.tokenizer, ids, drafter))


def test_the_race_shows_the_predicted_speedup_beside_the_measured(target):
    res = race(target, FixedTreeDrafter(64, [[5, 6], [7]]))
    p = res.prediction
    assert p is not None and p.speedup == pytest.approx(p.tau * p.forward_s / (p.draft_s + p.verify_s))
    line = render_result(res)
    assert "Predicted from acceptance and cost" in line and f"{p.speedup:.2f}×" in line
    assert f"{p.tau:.2f} tokens per verify step × {1000 * p.forward_s:.1f} ms" in line  # its arithmetic, on hover
    answer = summary(res, "p")
    assert answer["predicted_speedup"] == round(p.speedup, 4)
    rebuilt_from_json(answer)
    # One tau: the per-step figure the speedup multiplies.
    assert answer["predicted_tau"] == answer["prediction"]["tau_step"] == round(p.tau, 6)
    # The run's tau from its acceptance: the measured one's definition, so near it (equal when no step was cut).
    assert answer["predicted_run_tau"] == pytest.approx(answer["gumiho"]["tau"], rel=0.15)


def rebuilt_from_json(answer: dict) -> None:
    """A shown prediction is redone from its shown inputs, to its shown 4 decimals."""
    shown = answer["prediction"]
    assert shown["tau_step"] == pytest.approx(1 + sum(shown["acceptance_by_position"]), abs=1e-5)
    rebuilt = shown["tau_step"] * shown["forward_s"] / (shown["draft_s"] + shown["verify_s"])
    assert rebuilt == pytest.approx(answer["predicted_speedup"], abs=1.5e-4), (rebuilt, answer)


def test_predicted_tau_is_the_measured_at_temperature_zero(target):
    """The run-level prediction from its own acceptance by position equals the tau it
    measured, for a run no step of which was cut (the answer ends on a step's bonus)."""
    drafter = FixedTreeDrafter(64, [[5, 6], [7]])
    ids = [1, 2, 3, 4]
    for tokens in range(8, 40):
        events = list(stream(target, ids, drafter, GenerationSettings(max_new_tokens=tokens)))
        if not events[-1].cut_nodes and len(events[-1].emitted) == events[-1].accepted_length + 1:
            break
    st = summarize(events)
    steps = [e for e in events if e.step > 0]
    assert predicted_run_tau(summarize(steps).acceptance_by_position(), len(steps)) == pytest.approx(st.tau)


def test_the_whatif_sliders_predict_and_fill_from_a_race(target):
    start = {f"a{d + 1}": a for d, a in enumerate(START_ACCEPTANCE)}
    html = predicted({**start, "verify": 1.0, "draft": 0.2})["result"]
    expected = (1 + sum(START_ACCEPTANCE)) / 1.2
    assert f'data-speedup="{expected:.4f}"' in html and "faster" in html
    # A step that costs more forwards than it writes tokens loses: the 4-bit runtime's lesson.
    assert "slower" in predicted({**start, "verify": 2.9, "draft": 0.2})["result"]
    assert monotone([0.5, 0.7, 0.2]) == ([0.5, 0.5, 0.2], True)
    assert "cannot rise" in predicted({**start, "a2": 0.9, "verify": 1.0, "draft": 0.2})["result"]
    assert "Give numbers" in predicted({**start, "verify": "x", "draft": 0.2})["result"]
    assert "Give numbers" in predicted({**start, "verify": None, "draft": 0.2})["result"]
    assert "Run a race first" in from_race({"race": None})["result"]
    res = race(target, FixedTreeDrafter(64, [[5, 6], [7]]))
    filled = from_race({"race": res})
    p = res.prediction
    assert filled["a1"].value == round((p.acceptance + [0.0])[0], 2)
    assert filled["verify"].value == round(p.verify_s / p.forward_s, 2)


def test_the_comparison_predicts_each_drafters_speedup(target):
    from app.compare.run import CompareForm, compute_compare, parse_compare
    from app.compare.summary import compare_summary
    from app.compare.tab import render_table

    hub = ready_hub(target, FixedTreeDrafter(64, [[5, 6], [7]]))
    hub.default = target
    cmp = compute_compare(hub, parse_compare(CompareForm("hi", 16)), threading.Event())
    answer = compare_summary(cmp, "hi")
    for d in answer["drafters"]:
        assert d["predicted_speedup"] is not None and d["predicted_tau"] >= 1
        rebuilt_from_json(d)
        assert d["predicted_tau"] == d["prediction"]["tau_step"]
    # The table's predicted column, redone from its own cells: tokens/step x vanilla's
    # ms/step / (drafting + verify ms/step), each read as shown (so within its rounding).
    table = render_table(cmp)
    assert "predicted</th>" in table and "tokens/step</th>" in table
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    col = {h: i for i, h in enumerate(heads)}
    vanilla = rows[0]
    assert vanilla[col["Decoder"]] == "Vanilla" and vanilla[col["drafting ms/step"]] == "–"
    forward_ms = float(vanilla[col["verify ms/step"]])
    checked = 0
    for row in rows[1:]:
        if row[col["predicted"]] == "–":
            continue
        per_step, shown = float(row[col["tokens/step"]]), float(row[col["predicted"]].rstrip("x"))
        step_ms = float(row[col["drafting ms/step"]]) + float(row[col["verify ms/step"]])
        rebuilt = per_step * forward_ms / step_ms
        # Each ms to at least 3 figures, tokens/step to 3 decimals: well inside 1%.
        assert rebuilt == pytest.approx(shown, rel=0.01, abs=0.006), (row, rebuilt)
        checked += 1
    assert checked == len(answer["drafters"])


def test_a_race_with_nothing_to_measure_predicts_nothing(target):
    req = parse_request(RaceForm("hi", 1))
    assert req.settings.max_new_tokens == 1
    res = race(target, FixedTreeDrafter(64, [[5]]), tokens=1)
    assert res.prediction is None and "Predicted" not in render_result(res)
    assert summary(res, "p")["predicted_speedup"] is None


def test_whatif_holds_every_figure_a_race_gives():
    """Issue 76: "Use the last race's figures" set verify 5.64 on a slider whose track
    ended at 5, and Gradio's own check left "Error" on the page. The tracks now hold
    such figures, a race's figure beyond one widens it, and a figure typed beyond one
    is used and said so."""
    from types import SimpleNamespace

    import gradio as gr

    from app.race.whatif import DRAFT_RANGE, VERIFY_RANGE
    from app.views.sliders import FigureSlider
    from gumiho.lab.speedmodel import SpeedPrediction

    def race_with(verify_ratio, draft_ratio):
        forward = 0.01
        p = SpeedPrediction(tau=2.0, speedup=1.0, acceptance=[0.6, 0.4], forward_s=forward,
                            draft_s=draft_ratio * forward, verify_s=verify_ratio * forward)
        return SimpleNamespace(prediction=p)

    filled = from_race({"race": race_with(5.64, 0.3)})
    assert filled["verify"].value == 5.64 and VERIFY_RANGE[0] <= 5.64 <= VERIFY_RANGE[1]
    assert 'data-speedup="' in filled["result"] and "beyond" not in filled["result"]
    # Beyond the usual track: widened to hold it, and said.
    filled = from_race({"race": race_with(14.3, 7.25)})
    assert (filled["verify"].value, filled["verify"].maximum) == (14.3, 15.0)
    assert (filled["draft"].value, filled["draft"].maximum) == (7.25, 8.0) and DRAFT_RANGE[1] < 7.25
    assert "widened to hold it" in filled["result"] and filled["tracks"]["verify"] == (VERIFY_RANGE[0], 15.0)
    start = {f"a{d + 1}": a for d, a in enumerate(START_ACCEPTANCE)}
    html = predicted({**start, "verify": 14.3, "draft": 7.25, "tracks": filled["tracks"]})["result"]
    assert "beyond" not in html and f'data-speedup="{(1 + sum(START_ACCEPTANCE)) / 21.55:.4f}"' in html
    # Typed beyond the track: used as typed, and said; Gradio's own slider would refuse it.
    html = predicted({**start, "verify": 25, "draft": 0.2})["result"]
    assert f'data-speedup="{(1 + sum(START_ACCEPTANCE)) / 25.2:.4f}"' in html
    assert "Verify 25 lies beyond its slider&#x27;s track (0.1 to 10)" in html
    assert "from 0 to 1" in predicted({**start, "a1": 1.4, "verify": 1, "draft": 0.2})["result"]
    assert "more than 0 forwards" in predicted({**start, "verify": 0, "draft": 0.2})["result"]
    assert FigureSlider(0.1, 10, value=1).preprocess(25) == 25
    with pytest.raises(gr.Error):
        gr.Slider(0.1, 10, value=1).preprocess(25)
