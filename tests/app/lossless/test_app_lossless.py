"""The Lossless? tab and /lossless_check (issue 70): the form checked in words, the
experiment run through the app on a tiny target whose drafter the wrong rules follow
astray, its JSON and figure; the default model's experiment in the slow tier."""
from __future__ import annotations

import json
import threading

import pytest

from app.lossless.figures import SHOWN, samples_figure
from app.lossless.run import LosslessForm, compute_lossless, parse_lossless, sequence_texts
from app.lossless.summary import lossless_summary
from app.lossless.tab import lossless_outputs
from gumiho import GumihoError
from helpers import FixedTreeDrafter, ready_hub, tiny_target


class Letters:
    """Token i reads as a letter (a-z, then A-Z, then '#i')."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i) if i < 26 else chr(39 + i) if i < 52 else f"#{i}" for i in ids)

    def __call__(self, text):
        return {"input_ids": [ord(ch) % 26 for ch in text]}

    chat_template = None
    all_special_ids = []


def test_the_form_is_checked_in_words():
    req = parse_lossless(LosslessForm("hi"))
    assert (req.temperature, req.samples, req.tokens, req.rule, req.seed) == (0.8, 200, 2, "exact", 0)
    for form, words in ((LosslessForm("hi", temperature=0), "Temperature"), (LosslessForm("hi", samples=5), "Samples"),
                        (LosslessForm("hi", tokens=4), "Tokens"), (LosslessForm("hi", rule="maybe"), "Unknown rule"),
                        (LosslessForm(""), "prompt")):
        with pytest.raises(GumihoError, match=words):
            parse_lossless(form)
    # One first token is refused, saying why: it is the prefill's, drawn before any draft.
    with pytest.raises(GumihoError, match="first token comes from the prefill, before anything is drafted"):
        parse_lossless(LosslessForm("hi", tokens=1))


def test_the_page_refuses_one_token_and_says_the_first_is_the_targets():
    import gradio as gr

    from app.lossless.tab import INTRO, add_lossless_tab
    from app.replays import Replays

    with gr.Blocks():
        add_lossless_tab(None, ["hi"], False, Replays(None))
        sliders = [b for b in gr.context.Context.root_block.blocks.values()
                   if isinstance(b, gr.Slider) and b.label == "First tokens"]
    assert len(sliders) == 1 and sliders[0].minimum == 2
    assert "the first token is the target's own" in INTRO


def test_sequences_that_read_alike_keep_apart():
    class Same:
        def decode(self, ids, skip_special_tokens=False):
            return "x"

    texts = sequence_texts({(1, 2), (3,), ()}, Same())
    assert len(set(texts.values())) == 3 and texts[(1, 2)] == "x [1, 2]"
    assert sequence_texts({()}, Letters())[()] == "(end)"


@pytest.fixture(scope="module")
def hub():
    """A tiny target with a drafter that proposes what the target rarely writes: keeping
    its drafts (the wrong rule) moves the first tokens far from the target's."""
    target = tiny_target("llama", vocab=64, hidden=32, eos=63, seed=7, init=0.5)
    target.tokenizer = Letters()
    target.encode = lambda text: [1, 2, 3, 4]
    drafter = FixedTreeDrafter(64, [[5, 6]])
    return ready_hub(target, drafter, "scripted drafter")


@pytest.mark.parametrize("rule, differ", [("exact", False), ("keep_drafts", True)])
def test_the_experiment_passes_the_engines_rule_and_fails_a_wrong_one(hub, rule, differ):
    req = parse_lossless(LosslessForm("hi", temperature=1.0, samples=150, tokens=2, rule=rule, seed=1))
    result = compute_lossless(hub, req, threading.Event())
    answer = lossless_summary(result)
    json.dumps(answer)
    assert answer["rule"] == rule and answer["samples"] == 150
    assert sum(answer["vanilla"].values()) == sum(answer["speculative"].values()) == 150
    assert (answer["p_value"] < 0.001) if differ else (answer["p_value"] > 0.01), answer
    assert answer["dof"] >= 1 and "pooled" in answer["pooling"]
    fig = samples_figure(result)
    assert len(fig.data) == 2 and len(fig.data[0]["y"]) <= SHOWN + 2
    # The plot's pooled bar counts what the test pooled, in the verdict's words.
    pooled = [y for y in fig.data[0]["y"] if "pooled by the test" in y]
    assert pooled == ([f"{answer['pooled']} rare one{'s' if answer['pooled'] != 1 else ''} pooled by the test"]
                      if answer["pooled"] else [])
    assert all(sum(trace["x"]) == pytest.approx(1.0) for trace in fig.data)
    shown = lossless_outputs(result)
    assert ('class="gm-ll-verdict differ"' in shown["verdict"]) == differ
    # Said once, and in words: no code name of a rule.
    assert shown["verdict"].count("The two samples differ") == int(differ)
    assert rule not in shown["verdict"] and rule not in answer["verdict"]


def test_a_stopped_experiment_tests_what_was_drawn(hub):
    stop = threading.Event()
    stop.set()
    result = compute_lossless(hub, parse_lossless(LosslessForm("hi", samples=20, tokens=2)), stop)
    assert result.check.stopped and result.check.samples == 0
    assert "stopped early" in lossless_outputs(result)["status"]
