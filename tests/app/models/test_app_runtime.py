"""The app on the library's default runtime: the race runs the default model as its
GGUF file stores it (llama.cpp) unless the page asks for float32 weights, says which
ran and why it decides the speedup, and moves a drafter llama.cpp cannot serve to
float32 (both columns), or refuses it in words when 4-bit weights are asked for."""
import threading

import pytest

from app.core.forms import RACE_WEIGHTS, WEIGHTS_AS_STORED, WEIGHTS_FLOAT32, RaceForm, parse_request
from app.race.run import compute_race
from app.race.summary import summary
from app.views.render import render_result
from gumiho.errors import GumihoError

# Written for this test, not from a bench set.
PROMPT = "Name three rivers of Europe and one city on each."


@pytest.fixture(scope="module")
def hub(request):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (requirements.txt) is not installed")
    return request.getfixturevalue("default_hub")  # tests/app/conftest.py: loaded after the skip, not before


def race(hub, weights="", kind="gumiho", max_new=24, tree=(None, None, None)):  # the page's untouched tree
    req = parse_request(RaceForm(PROMPT, max_new, 0.0, 1.0, 0, *tree, kind, "", "", target_weights=weights))
    return compute_race(hub, req, threading.Event())


def test_the_default_race_shows_the_hybrid_beside_the_fastest_way(hub):
    """The page's default races float32 weights, where the whole hybrid drafter works
    (positions 3 and up drafted by the MLP heads), and gives beside the two lanes vanilla
    on the 4-bit file, the fastest way to run the model here, timed after the race."""
    assert hub.default.runtime.name == "llama.cpp"  # the library's default load
    result = race(hub)
    answer = summary(result, PROMPT)
    assert answer["runtime"] == "torch" and answer["weights"] == "float32"
    assert answer["vanilla"]["tokens"] == answer["gumiho"]["tokens"]
    assert result.gumiho.layout.drafted_depth >= 3  # the MLP heads draft
    assert len(answer["gumiho"]["acceptance_by_position"]) >= 3
    fastest = answer["fastest"]
    assert fastest["runtime"] == "llama.cpp" and fastest["weights"].startswith("4-bit")
    assert fastest["new_tokens"] >= 1 and fastest["tokens_per_s"] > 0
    line = render_result(result)
    assert "fastest way to run this model" in line and "4-bit" in line


def test_the_4bit_race_is_one_choice_away_with_its_lesson(hub):
    result = race(hub, WEIGHTS_AS_STORED)
    answer = summary(result, PROMPT)
    assert answer["runtime"] == "llama.cpp" and answer["fastest"] is None
    assert answer["vanilla"]["tokens"] == answer["gumiho"]["tokens"]  # lossless on this runtime too
    assert result.gumiho.layout.drafted_depth == 1  # the page's default tree became the runtime's chain of one
    line = render_result(result)
    assert "4-bit, as stored" in line and "llama.cpp" in line
    if answer["speedup"] < 1:  # the reason is given where it loses
        assert "bound by arithmetic" in line and "float32 weights (Settings)" in line


def test_a_tree_the_page_changed_is_raced_as_set_on_llamacpp(hub):
    result = race(hub, WEIGHTS_AS_STORED, tree=(2, 4, 4))
    assert summary(result, PROMPT)["runtime"] == "llama.cpp" and result.gumiho.layout.drafted_depth == 2


def test_float32_weights_race_the_torch_view_of_the_same_model(hub):
    assert hub.resolve("", "gumiho", "", False, WEIGHTS_FLOAT32).target.runtime.name == "torch"
    # The same model object: the view costs no memory; "" (the page's default) is float32.
    assert hub.resolve("", "gumiho", "", False, WEIGHTS_FLOAT32).target.model is hub.default.model
    assert hub.resolve("", "gumiho").target is hub.resolve("", "gumiho", "", False, WEIGHTS_FLOAT32).target


def test_an_inner_layer_drafter_races_in_float32_or_is_refused_as_stored(hub):
    if "eagle3" not in hub.shipped_kinds():
        pytest.skip("no shipped eagle3 drafter")
    assert hub.resolve("", "eagle3").target.runtime.name == "torch"  # the page's default weights
    with pytest.raises(GumihoError, match="inner layers.*float32 weights"):
        hub.resolve("", "eagle3", "", False, WEIGHTS_AS_STORED)
    assert hub.resolve("", "gumiho", "", False, WEIGHTS_AS_STORED).target.runtime.name == "llama.cpp"


def test_weights_the_page_does_not_offer_are_refused_in_words():
    assert RACE_WEIGHTS == (WEIGHTS_AS_STORED, WEIGHTS_FLOAT32)
    with pytest.raises(GumihoError, match="Unknown target weights"):
        parse_request(RaceForm(PROMPT, 8, 0.0, 1.0, 0, 3, 4, 5, target_weights="int2"))
    assert parse_request(RaceForm(PROMPT, 8, 0.0, 1.0, 0, 3, 4, 5)).target_weights == ""


def test_as_stored_weights_without_llamacpp_are_refused_in_words():
    import torch

    from app.models.hub import runs_on
    from gumiho import Target

    class Cfg:
        feature_layers = None

    class FakeDrafter:
        cfg = Cfg()

    target = Target(torch.nn.Linear(1, 1), None, "m", torch.device("cpu"), torch.float32)
    with pytest.raises(GumihoError, match="4-bit weights as stored need the llama.cpp runtime"):
        runs_on(target, FakeDrafter(), WEIGHTS_AS_STORED, "Gumiho")
    assert runs_on(target, FakeDrafter(), WEIGHTS_FLOAT32, "Gumiho") is target
    assert runs_on(target, FakeDrafter(), "", "Gumiho") is target


def test_the_page_says_when_the_4bit_runtime_is_not_installed(monkeypatch):
    """On a Space (wheels only) llama-cpp-python is missing: the weights control offers
    float32 alone and its words say why, and how to race the 4-bit file."""
    from app.race import settings as race_settings

    monkeypatch.setattr(race_settings, "llamacpp_available", lambda: False)
    monkeypatch.setattr("app.core.zerogpu.model_device", lambda: "cpu")
    monkeypatch.setattr("gumiho.loading.runtime.llamacpp_available", lambda: False)
    from app.core.settings import AppSettings
    from app.models.hub import runtime_for

    assert [value for _, value in race_settings.weights_choices(runtime_for(AppSettings()))] == [WEIGHTS_FLOAT32]
    info = race_settings.weights_info()
    assert "not installed on this server" in info and "pip install llama-cpp-python==0.3.36" in info
    monkeypatch.setattr(race_settings, "llamacpp_available", lambda: True)
    assert race_settings.weights_info() == race_settings.WEIGHTS_INFO


def test_a_device_sized_tree_set_by_hand_is_raced_as_set_on_llamacpp(hub):
    """The controls' starting values, sent as given (an API call naming them), are a
    tree like any other: raced as set, not swapped for the runtime's (no comparison
    by value with the page's defaults decides it)."""
    from app.core.forms import DEVICE_TREE
    result = race(hub, WEIGHTS_AS_STORED, tree=(DEVICE_TREE.depth, DEVICE_TREE.serial_top_k, DEVICE_TREE.total_tokens))
    assert result.gumiho.layout.tree_depth == DEVICE_TREE.depth


def test_untouched_tree_controls_are_sent_as_not_given():
    from app.core.forms import TREE_FIELDS, as_given
    values = {"prompt": "hi", "tree_depth": 3, "tree_top_k": 4, "tree_nodes": 5, "tree_cost_aware": False,
              "tree_shape": "sized"}
    untouched = as_given({**values, "tree_touched": False})
    assert all(untouched[name] is None for name in TREE_FIELDS) and untouched["prompt"] == "hi"
    assert "tree_touched" not in untouched
    assert as_given({**values, "tree_touched": True}) == values
    assert parse_request(RaceForm("hi", 8)).settings.tree is None  # the runtime's tree (GenerationSettings.tree_on)
    partly = parse_request(RaceForm("hi", 8, tree_depth=2)).settings.tree
    assert partly.depth == 2 and partly.total_tokens > 0  # the others at the controls' starting values
