"""The runtime's choice said aloud (issue 76): the weight-repack setting a llama.cpp load
got, and why, in words the library (Target.runtime_choice), the app's status line, the
4-bit choice's hint and /race's runtime_note all carry; and the fallback's log line
with one "gumiho" in it."""
import dataclasses
import logging
from types import SimpleNamespace

from gumiho.runtimes import llamacpp_trust
from gumiho.runtimes.llamacpp_trust import repack_words
from gumiho.runtimes.native_probe import Verdict
from helpers import ready_hub, tiny_target

AMX_OFF = repack_words(False)


def test_the_setting_and_why_in_words():
    assert AMX_OFF.startswith("weight repacking off: this CPU advertises AMX") and "SIGILL or SIGSEGV" in AMX_OFF
    assert repack_words(True).startswith("weight repacking on: this CPU advertises no AMX")
    assert repack_words(False, died="SIGSEGV").startswith("weight repacking off: with it on, llama.cpp died with "
                                                          "SIGSEGV in its trial")
    assert repack_words(False, asked=False) == "weight repacking off, as asked"
    assert repack_words(True, asked=True) == "weight repacking on, as asked"


def test_a_death_with_the_repack_on_is_named_and_logged_once_prefixed(monkeypatch, caplog):
    dead = Verdict("llama.cpp", False, signal="SIGSEGV", detail="general protection fault",
                   setting={"extra_buffers": True})
    alive = Verdict("llama.cpp", True, setting={"extra_buffers": False})
    monkeypatch.setattr(llamacpp_trust, "bindings_key", lambda: {"bindings": "test"})
    monkeypatch.setattr(llamacpp_trust, "fingerprint", lambda path: "file")
    monkeypatch.setattr(llamacpp_trust, "first_usable", lambda *a: (alive, [dead, alive]))
    with caplog.at_level(logging.WARNING, logger="gumiho"):
        verdict = llamacpp_trust.trust("t.gguf", 2, True, (1,))
    assert verdict.usable and verdict.info["repack_died"] == "SIGSEGV"
    assert alive.info == {}  # the verdict as kept is untouched
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("llama.cpp died with SIGSEGV"), said
    # The logger is named gumiho; a format that names it prints "gumiho" once, not "gumiho: gumiho:".
    assert caplog.records[0].name == "gumiho" and "gumiho" not in said[0]


def four_bit(target, words=AMX_OFF):
    """``target`` as if loaded on llama.cpp's 4-bit file with ``words`` as its load setting."""
    runtime = SimpleNamespace(name="llama.cpp", quantized=True, weights="4-bit, as stored", load_words=words,
                              flat_verify=False)
    return dataclasses.replace(target, runtime=runtime, _torch_view=target)


def test_the_target_says_its_runtime_and_setting():
    target = tiny_target()
    assert target.runtime_choice == "float32 in PyTorch"
    assert four_bit(target).runtime_choice == f"4-bit in llama.cpp, {AMX_OFF}"
    fell_back = dataclasses.replace(target, runtime_note="llama.cpp died with SIGILL (illegal instruction) here")
    assert fell_back.runtime_choice == "float32 in PyTorch, not llama.cpp: llama.cpp died with SIGILL " \
                                       "(illegal instruction) here"


def test_the_status_line_the_hint_and_the_race_say_it():
    from app.race.settings import WEIGHTS_INFO, weights_info
    from app.views.records import runtime_words

    target = tiny_target()
    loaded = four_bit(target)
    hub = ready_hub(loaded, None)
    hub.default = loaded
    level, text = hub.status()
    assert level in ("ready", "warn") and f"It runs 4-bit in llama.cpp, {AMX_OFF}." in text
    assert hub.runtime_choice == loaded.runtime_choice
    assert weights_info(hub.native_note, hub.runtime_choice) == WEIGHTS_INFO + f" Here: 4-bit in llama.cpp, {AMX_OFF}."
    plain = ready_hub(target, None)
    plain.default = target
    assert plain.runtime_choice == "" and "It runs float32 in PyTorch." in plain.status()[1]
    # /race's runtime_note: what ran the race, and the model as loaded when the race ran another view of it.
    assert runtime_words(target, loaded) == (f"The race ran float32 in PyTorch. The model as loaded runs 4-bit in "
                                             f"llama.cpp, {AMX_OFF}.")
    assert runtime_words(loaded) == f"The race ran 4-bit in llama.cpp, {AMX_OFF}."
