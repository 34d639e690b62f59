"""The Compare tab's work and the /compare endpoint (app/compare/run.py,
app/compare/summary.py, app/compare/tab.py): the default model decoded by vanilla
and by every shipped drafter with one tree, each text vanilla's token for token, the
JSON's figures per drafter, the drafters that cannot run listed with the reason,
Stop, the busy limit and bad input refused in words."""
import asyncio
import threading
import time

import pytest

from app.compare.figures import acceptance_lines, step_time_figure
from app.compare.run import COMPARE_MAX_NEW_TOKENS, CompareForm, compute_compare, parse_compare
from app.compare.summary import compare_summary
from app.compare.tab import comparison_outputs, render_table
from app.core.forms import WEIGHTS_AS_STORED
from app.core.worker import BUSY
from app.models.hub import ModelHub
from app.views.palette import plot_colour
from app.web.api import api_compare
from gumiho.errors import GumihoError

# Written for this test, not from a bench set.
PROMPT = "Describe a walk through a forest in autumn, in about a hundred words."
KEYS = ("text", "tau", "acceptance_by_position", "conditional_acceptance_by_position", "drafting_s", "verify_s",
        "tokens_per_s", "parameters", "speedup", "same_as_vanilla", "serial_positions", "mlp_positions")


@pytest.fixture(scope="module")
def hub(default_hub):
    return default_hub  # tests/app/conftest.py


@pytest.fixture(scope="module")
def compared(hub):
    req = parse_compare(CompareForm(PROMPT, 32, copy_alone=True, gumiho_with_copy=True))
    return compute_compare(hub, req, threading.Event())


def test_every_drafter_decodes_vanillas_text_and_reports_its_figures(compared):
    cmp = compared
    answer = compare_summary(cmp, PROMPT)
    assert answer["ok"] and answer["runtime"] == "torch" and answer["weights"] == "float32"
    assert [d["method"] for d in answer["drafters"]] == ["gumiho", "serial", "parallel", "eagle3", "copy",
                                                          "gumiho+copy"]
    assert not answer["skipped"]
    vanilla_tokens = [t for ev in cmp.vanilla.events for t in ev.tokens]
    assert len(vanilla_tokens) >= 16
    for c, d in zip(cmp.drafters, answer["drafters"]):
        assert all(k in d for k in KEYS), sorted(set(KEYS) - set(d))
        # Lossless per drafter: the same tokens as vanilla, and the same text.
        assert [t for ev in c.record.events for t in ev.tokens] == vanilla_tokens and d["same_as_vanilla"]
        assert d["text"] == answer["vanilla"]["text"]
        assert d["tau"] >= 1.0 and d["tokens_per_s"] > 0 and d["speedup"] > 0
        assert d["drafting_s"] > 0 and d["verify_s"] > 0
        depth = cmp.depth
        assert len(d["acceptance_by_position"]) == len(d["conditional_acceptance_by_position"]) == depth
        assert all(0 <= a <= 1 for a in d["acceptance_by_position"])
        assert d["acceptance_by_position"] == sorted(d["acceptance_by_position"], reverse=True)
    by = {d["method"]: d for d in answer["drafters"]}
    # The heads each drafter drafted with, on the race's tree (depth 3 on a CPU).
    assert by["gumiho"]["serial_positions"] == [1, 2] and by["gumiho"]["mlp_positions"] == list(range(3, depth + 1))
    assert by["serial"]["mlp_positions"] == [] and by["parallel"]["serial_positions"] == []
    assert by["copy"]["parameters"] == 0 and by["gumiho"]["parameters"] > 1_000_000
    assert by["gumiho+copy"]["parameters"] == by["gumiho"]["parameters"]
    # Trained drafters accept something on an everyday prompt.
    assert all(by[k]["tau"] > 1.2 for k in ("gumiho", "serial", "parallel"))
    findings = answer["findings"]
    assert findings[0].startswith("All 7 texts are identical to vanilla's")
    assert any("all-serial drafter's guesses were accepted in" in s for s in findings)
    assert any(s.startswith("Drafting took") for s in findings)
    assert any(s.startswith(("Fastest on this prompt", "No drafter beat vanilla")) for s in findings)


def test_the_plots_draw_a_line_per_drafter_coloured_by_head(compared):
    cmp = compared
    acc = acceptance_lines(cmp)
    lines = [t for t in acc.data if t["mode"] == "lines+markers"]
    assert [t["name"] for t in lines] == ["Gumiho", "All-serial", "All-parallel", "EAGLE-3", "Copying",
                                          "Gumiho + copying"]
    gumiho = lines[0]["marker"]["color"]
    serial_blue, mlp_orange = plot_colour("serial", 0, 1), plot_colour("mlp", 0, 1)
    assert gumiho[0] != gumiho[2]  # position 1 a serial step, position 3 an MLP head
    assert lines[2]["marker"]["color"][0] == plot_colour("mlp", 0, cmp.drafters[2].record.layout.max_depth)
    assert {t["name"] for t in acc.data if t["mode"] == "markers"} == {
        "marker: a serial step drafted it", "marker: an MLP head drafted it"}
    assert {t["marker"]["color"] for t in acc.data if t["mode"] == "markers"} == {serial_blue, mlp_orange}
    cond = acceptance_lines(cmp, conditional=True)
    assert cond.layout["title"]["text"].startswith("Conditional acceptance")
    bars = step_time_figure(cmp)
    assert bars.data[0]["x"][0] == "Vanilla" and len(bars.data[0]["x"]) == 7
    assert bars.data[1]["y"][0] < 0.05 * bars.data[0]["y"][0]  # vanilla drafts nothing (a no-op, timed)
    acc.to_json(), bars.to_json()  # what the page sends: valid JSON
    shown = comparison_outputs(cmp)
    assert "identical" in shown["table"] and "DIFFERS" not in shown["table"]
    assert "All 7 texts are identical" in shown["findings"]


def test_a_drafter_that_cannot_run_is_listed_with_the_reason(hub):
    """On the 4-bit runtime EAGLE-3 cannot draft (it reads inner layers llama.cpp does
    not hand out): it is listed with that reason, and the others run there, losslessly."""
    if hub.default.torch_view() is hub.default:
        pytest.skip("llama-cpp-python is not installed: no 4-bit runtime to compare on")
    req = parse_compare(CompareForm(PROMPT, 12, target_weights=WEIGHTS_AS_STORED))
    cmp = compute_compare(hub, req, threading.Event())
    answer = compare_summary(cmp, PROMPT)
    assert answer["runtime"] == "llama.cpp"
    assert [s["method"] for s in answer["skipped"]] == ["eagle3"]
    assert "inner layers" in answer["skipped"][0]["reason"]
    assert [d["method"] for d in answer["drafters"]] == ["gumiho", "serial", "parallel"]
    assert all(d["same_as_vanilla"] for d in answer["drafters"])
    assert "not run" in render_table(cmp) and "inner layers" in comparison_outputs(cmp)["status"]


class StopAfter(threading.Event):
    """A stop flag that turns itself on after ``n`` looks (the decoders look once a step)."""

    def __init__(self, n: int):
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        self.left -= 1
        if self.left <= 0:
            self.set()
        return super().is_set()


def test_stop_ends_every_decoder_and_says_so(hub):
    req = parse_compare(CompareForm(PROMPT, 64))
    cmp = compute_compare(hub, req, StopAfter(25))
    assert cmp.stopped
    assert sum(len(c.record.events) for c in cmp.drafters) + len(cmp.vanilla.events) < 64
    answer = compare_summary(cmp, PROMPT)
    assert answer["stopped"] and answer["findings"][0].startswith("Stopped")
    assert all(d["speedup"] is None for d in answer["drafters"])
    assert comparison_outputs(cmp)["status"]  # the page still shows what was produced


@pytest.mark.parametrize("form, words", [
    (CompareForm(""), "prompt is empty"),
    (CompareForm(PROMPT, COMPARE_MAX_NEW_TOKENS + 1), f"from 1 to {COMPARE_MAX_NEW_TOKENS}"),
    (CompareForm(PROMPT, "lots"), "Max new tokens"),
    (CompareForm(PROMPT, tree_shape="bushy"), "Unknown tree 'bushy'"),
    (CompareForm(PROMPT, tree_depth=99), "Tree depth"),
    (CompareForm(PROMPT, target_weights="int2"), "Unknown target weights 'int2'"),
    (CompareForm(PROMPT, copy_alone="maybe"), "Copying alone must be true or false"),
])
def test_bad_input_is_refused_in_words(form, words):
    with pytest.raises(GumihoError, match=words):
        parse_compare(form)
    answer = asyncio.run(api_compare(ModelHub(warmup=False), form))
    assert not answer["ok"] and words.split("'")[0] in answer["message"] and "Traceback" not in answer["message"]


def test_the_papers_tree_serves_every_drafter():
    req = parse_compare(CompareForm(PROMPT, tree_shape="paper", tree_depth=99))  # the controls are not used
    assert req.settings.tree.total_tokens == 63 and req.settings.tree.depth == 7
    assert req.settings.temperature == 0.0


def test_the_busy_limit_refuses_a_comparison_in_words(hub):
    gate = threading.Event()
    hub.submit(gate.wait)
    while hub._worker.waiting():
        time.sleep(0.01)
    waiting = [hub.submit(lambda: None) for _ in range(hub._worker.max_waiting)]
    try:
        answer = asyncio.run(api_compare(hub, CompareForm(PROMPT, 4)))
        assert not answer["ok"] and answer["message"] == BUSY.format(n=hub._worker.max_waiting)
    finally:
        gate.set()
    for f in waiting:
        f.result(10)


@pytest.mark.slow


def test_each_drafters_tau_is_the_benchmarks():
    """The comparison's tau per drafter equals `python -m gumiho.bench`'s on the same
    prompts, tree and runtime: the same code path (benchmarks/compare_vs_bench.py; its
    default, the first 10 MT-Bench prompts at 64 tokens, is the closing check)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "benchmarks/compare_vs_bench.py", "--limit", "2", "--max-new-tokens", "16"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0 and "every tau equal" in out.stdout, out.stdout + out.stderr[-2000:]
