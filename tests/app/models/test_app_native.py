"""The app when the 4-bit runtime dies on this CPU: `python app.py` with a stand-in
llama-cpp-python whose decode dies by SIGILL (tests/fakes/dying_llama_cpp) serves
/race on float32 with identical texts, says why in its status line, answers a 4-bit
request in words, and is alive afterwards with no traceback in its log. The banner and
the weights choice are checked on a hub whose target carries the same note."""
import os
from pathlib import Path

import gradio_client
import pytest

from app.core.forms import WEIGHTS_AS_STORED
from app.race.settings import UNAVAILABLE, weights_choices, weights_info
from app_server import start_app, stop_app
from helpers import ready_hub, tiny_target

ROOT = Path(__file__).resolve().parents[3]
FAKE = ROOT / "tests" / "fakes" / "dying_llama_cpp"
NOTE = ("llama.cpp died with SIGILL (illegal instruction) on this CPU in a trial run in a child "
        "process")


@pytest.fixture(scope="module")
def dying_app(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    server = start_app({"PYTHONPATH": os.pathsep.join([str(FAKE), str(ROOT)]), "GUMIHO_CACHE": str(cache),
                        "GUMIHO_TEST_NATIVE_DEATH": "SIGILL", "GUMIHO_RUNTIME": None})
    yield server
    stop_app(server)


def test_the_race_runs_on_float32_and_the_process_lives(dying_app):
    client = gradio_client.Client(dying_app.url, verbose=False)
    answer = client.predict("Name three colours.", 12, api_name="/race")
    assert answer["ok"], answer
    assert answer["runtime"] == "torch" and answer["weights"] == "float32"
    assert answer["vanilla"]["tokens"] == answer["gumiho"]["tokens"] and answer["vanilla"]["tokens"]
    assert "SIGILL" in answer["runtime_note"] and "llama.cpp" in answer["runtime_note"]
    refused = client.predict("Name three colours.", 4, target_weights=WEIGHTS_AS_STORED, api_name="/race")
    assert not refused["ok"] and "SIGILL" in refused["message"] and "float32" in refused["message"]
    assert dying_app.proc.poll() is None  # alive after both
    log = dying_app.log()
    assert "Traceback" not in log
    assert sum("SIGILL" in line for line in log.splitlines()) == 1  # the one line the library logs


def loaded_hub(target):
    hub = ready_hub(target, None)
    hub.default = target  # as the hub's own load leaves it
    return hub


def test_the_status_line_and_the_weights_choice_say_why():
    target = tiny_target()
    target.runtime_note = NOTE
    hub = loaded_hub(target)
    level, text = hub.status()
    assert level == "warn" and "SIGILL" in text and "float32" in text
    labels = dict((v, k) for k, v in weights_choices(hub.runtime, hub.native_note))
    if WEIGHTS_AS_STORED in labels:  # offered where llama-cpp-python is installed: marked unavailable
        assert labels[WEIGHTS_AS_STORED].endswith(UNAVAILABLE)
    assert "SIGILL" in weights_info(hub.native_note) and "unavailable" in weights_info(hub.native_note)


def test_a_model_on_its_runtime_says_nothing_of_it():
    hub = loaded_hub(tiny_target())
    assert hub.native_note == "" and "4-bit runtime is off" not in hub.status()[1]
    assert all(not label.endswith(UNAVAILABLE) for label, _ in weights_choices(hub.runtime, hub.native_note))
