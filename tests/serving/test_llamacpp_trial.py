"""llama-server tried before it is trusted (gumiho.serving.llamacpp_trial), with a
stand-in server (tests/fakes/fake_llama_server.py) named by GUMIHO_LLAMA_SERVER: one
that dies by a signal is reported in words by `gumiho.serve --engine llama.cpp`, which
exits in one line; one that dies only with weight repacking is served with
--no-repack; and the command line follows the repack rule (off where AMX is advertised)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.stop_matrix import STOP_WAYS, stop_and_check, wait_serving

from gumiho.runtimes import native_probe
from gumiho.runtimes.llamacpp_trust import extra_buffers_default
from gumiho.serving.lifecycle import died_words, free_port
from gumiho.serving.llamacpp_command import server_command

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"


@pytest.fixture
def stand_in(tmp_path):
    """The stand-in as an executable, and the environment that names it."""
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    binary.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(ROOT), GUMIHO_CACHE=str(tmp_path / "cache"),
               GUMIHO_LLAMA_SERVER=str(binary), GUMIHO_TEST_SERVER_ARGS=str(tmp_path / "args.jsonl"))
    return binary, env, tmp_path / "args.jsonl"


def serve(env: dict, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gumiho.serve", "--engine", "llama.cpp", "--drafter", "none",
                             "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("death, words", [("SIGILL", "illegal instruction"), ("SIGSEGV", "segmentation fault")])
def test_a_server_that_dies_is_named_in_one_line(stand_in, death, words):
    _, env, args_file = stand_in
    process = serve(dict(env, GUMIHO_TEST_SERVER_DIES="always", GUMIHO_TEST_NATIVE_DEATH=death), free_port())
    out, err = process.communicate(timeout=120)
    assert process.returncode == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"llama-server died with {death} on this CPU" in lines[0] and words in lines[0]
    assert "GGML_NATIVE=OFF" in lines[0] and "--engine vllm" in lines[0]  # what to try
    assert "GUMIHO_LLAMA_SERVER names" in lines[0]  # the binary the user named, not this project's build
    starts = [json.loads(line)["args"] for line in args_file.read_text().splitlines()]
    assert len(starts) in (1, 2)  # the rule's setting, then (after a death with repacking) --no-repack
    assert "--no-repack" in starts[-1]
    # The verdict is kept: the next start tries nothing and says the same.
    again = serve(dict(env, GUMIHO_TEST_SERVER_DIES="always", GUMIHO_TEST_NATIVE_DEATH=death), free_port())
    _, err2 = again.communicate(timeout=120)
    assert again.returncode == 2 and err2 == err
    assert len(args_file.read_text().splitlines()) == len(starts)


def test_a_server_that_dies_only_with_repacking_is_served_without(stand_in, monkeypatch):
    _, env, args_file = stand_in
    port = free_port()
    process = serve(dict(env, GUMIHO_TEST_SERVER_DIES="with-repack"), port)
    try:
        deadline, said = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            said.append(line)
            if "serving at" in line or not line:
                break
        assert any("serving at" in line for line in said), "".join(said) + process.stderr.read()
    finally:
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert "Traceback" not in out + err
    starts = [json.loads(line)["args"] for line in args_file.read_text().splitlines()]
    assert "--no-repack" in starts[-1] and str(port) in starts[-1]  # the real start: without repacking
    if "--no-repack" not in starts[0]:  # where this CPU's rule repacks: a trial died first, and it says so
        assert any("died with SIGILL" in line and "--no-repack" in line for line in said)


def test_the_command_line_follows_the_repack_rule(monkeypatch):
    base = dict(binary=Path("llama-server"), target_file="t.gguf", drafter_file=None, kind="none", k=3, port=1)
    assert "--no-repack" in server_command(**base, repack=False)
    assert "--no-repack" not in server_command(**base, repack=True)
    plain = native_probe.cpu_signature()
    monkeypatch.setattr(native_probe, "cpu_signature", lambda: {**plain, "flags": ["avx2", "amx_tile", "amx_int8"]})
    assert "--no-repack" in server_command(**base)  # AMX advertised: off, for the server and the bindings alike
    assert not extra_buffers_default()
    monkeypatch.setattr(native_probe, "cpu_signature", lambda: {**plain, "flags": ["avx2", "avx512f"]})
    assert "--no-repack" not in server_command(**base)
    assert extra_buffers_default()


def test_died_words():
    assert died_words(-signal.SIGILL) == "died with SIGILL (illegal instruction)"
    assert died_words(1) == "exited with code 1"


def test_the_serve_commands_help_names_both_engines():
    """Issue 71: --help listed `--engine {vllm}` while its text named llama.cpp."""
    out = subprocess.run([sys.executable, "-m", "gumiho.serve", "--help"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert out.returncode == 0 and "{vllm,llama.cpp}" in out.stdout, out.stdout[:500]


@pytest.mark.parametrize("how", STOP_WAYS)
def test_nothing_is_left_running_after_the_command_stops(stand_in, how):
    """Issue 71: every server the command starts stops with it, whatever signal reaches
    which process; with its output piped to a reader that is gone (``| head``) too."""
    _, env, args_file = stand_in
    process = serve(dict(env, GUMIHO_TEST_SERVER_DIES="never"), free_port())
    wait_serving(process)
    stop_and_check(process, [json.loads(args_file.read_text().splitlines()[-1])["pid"]], how)
