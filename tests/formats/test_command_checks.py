"""Commands refuse what they can tell is wrong before any heavy work (issue 60): the
export and the vLLM server, given a drafter path that does not exist, a drafter of
another kind or a draft length it cannot serve, say so in seconds, naming it, having
loaded no model and built nothing. Also: unknown shipped kinds refused in words, a
short repr for a target, and exported files as readable as their folder."""
import os
import stat
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from gumiho import GumihoError
from gumiho.loading import check_drafter_source, shipped_drafter_path
from gumiho.serving.vllm_command import check_arguments

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_EAGLE3 = os.path.join(ROOT, "assets", "drafters", "smollm2-135m-eagle3")


def run(*args):
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return out, time.perf_counter() - t0


@pytest.mark.parametrize("command", [("gumiho.export", "gumiho"), ("gumiho.export", "eagle3")])
def test_an_export_of_a_missing_drafter_fails_at_once(tmp_path, command):
    out, took = run(*command, "/nonexistent/drafter", str(tmp_path / "out"))
    assert out.returncode == 2 and "'/nonexistent/drafter' does not exist" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "out").exists()
    assert "loading target" not in out.stdout + out.stderr
    assert took < 15, took


def test_an_export_of_another_kind_is_refused_before_loading(tmp_path):
    out, took = run("gumiho.export", "gumiho", SHIPPED_EAGLE3, str(tmp_path / "out"))
    assert out.returncode == 2 and "of the 'eagle3' kind" in out.stderr and "gumiho.export eagle3" in out.stderr
    assert took < 15, took


def test_the_server_checks_its_drafter_before_building_vllm(tmp_path, monkeypatch):
    """check_arguments runs first in serve() (before ensure_env): the command's answer
    comes in seconds, and nothing is written to the vLLM cache."""
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "cache"))
    out, took = run("gumiho.serve", "--drafter", "/nonexistent/drafter")
    assert out.returncode != 0 and "'/nonexistent/drafter' does not exist" in out.stdout + out.stderr
    assert took < 15 and not (tmp_path / "cache").exists()

    def args(drafter, k=None):
        return SimpleNamespace(drafter=drafter, num_speculative_tokens=k)

    shipped = shipped_drafter_path("gumiho")
    check_arguments(args(shipped, 7))
    check_arguments(args("none", 3))
    with pytest.raises(GumihoError, match="2 serial positions and 5 MLP heads, so at most 7"):
        check_arguments(args(shipped, 99))
    with pytest.raises(GumihoError, match="at least 1"):
        check_arguments(args(shipped, 0))
    with pytest.raises(GumihoError, match="'serial' kind, which vLLM cannot serve"):
        check_arguments(args(shipped_drafter_path("serial")))


def test_check_drafter_source_names_the_kind_or_leaves_it_to_the_loader(tmp_path):
    assert check_drafter_source(SHIPPED_EAGLE3) == "eagle3"
    assert check_drafter_source("amd/Gumiho-llama3-8b") is None  # a hub id: the loader's to check
    (tmp_path / "config.json").write_text("{not json")
    assert check_drafter_source(str(tmp_path)) is None


def test_an_unknown_shipped_kind_is_refused_in_words():
    with pytest.raises(GumihoError, match="Unknown drafter kind 'nope'; the kinds are gumiho"):
        shipped_drafter_path("nope")


def test_a_target_prints_in_one_short_line():
    from helpers import tiny_target

    text = repr(tiny_target("llama"))
    assert text.startswith("Target('tiny-llama', cpu, float32, runtime=torch") and len(text) < 120, text


def test_saved_weights_are_as_readable_as_their_config(tmp_path):
    """safetensors writes owner-only files; every file a save or export writes gets
    the mode a plain file gets there (issue 60)."""
    from gumiho import Drafter, DrafterConfig

    Drafter(DrafterConfig(hidden_size=32, vocab_size=64, num_attention_heads=2, num_key_value_heads=2)).save(
        str(tmp_path / "d"))
    modes = {name: stat.S_IMODE(os.stat(tmp_path / "d" / name).st_mode) for name in os.listdir(tmp_path / "d")}
    assert set(modes) == {"config.json", "model.safetensors"} and len(set(modes.values())) == 1, modes


@pytest.mark.parametrize("arguments, words", [
    (["--drafter", "/nonexistent/drafter"], "'/nonexistent/drafter' does not exist"),
    (["--drafter", "shipped-gumiho"], "llama.cpp has no Gumiho drafting"),
    (["--drafter", "none", "--num-speculative-tokens", "0"], "between 1 and 16, got 0"),
    (["--drafter", "none", "--target", "/nonexistent/model.gguf"], "'/nonexistent/model.gguf': no such file"),
    (["--drafter", "none", "--target", "README.md"], "is not a GGUF file"),
    (["--drafter", "none", "--target", "assets"], "is a folder; llama.cpp serves a GGUF file"),
    (["--drafter", "assets"], "is not a drafter folder of this project"),
])
def test_the_llamacpp_server_checks_its_arguments_before_building(tmp_path, monkeypatch, arguments, words):
    """python -m gumiho.serve --engine llama.cpp refuses in words, in seconds, with
    nothing fetched or compiled (the cache folder is never created)."""
    monkeypatch.setenv("GUMIHO_CACHE", str(tmp_path / "cache"))
    arguments = [shipped_drafter_path("gumiho") if a == "shipped-gumiho" else a for a in arguments]
    out, took = run("gumiho.serve", "--engine", "llama.cpp", *arguments)
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and took < 15 and not (tmp_path / "cache").exists()


def test_an_unknown_engine_is_refused_in_words():
    out, _ = run("gumiho.serve", "--engine", "tgi", "--drafter", "none")
    assert out.returncode == 2 and "--engine must be one of vllm, llama.cpp, got 'tgi'" in out.stderr
