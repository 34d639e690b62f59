"""The shipped eagle3 drafter served by llama.cpp's own server (llama-server built from
the pinned source, gumiho.serving.llamacpp_build; built once per machine and cached)
with llama.cpp's EAGLE-3 drafting, on the embedded default target's 4-bit file:

* greedy tokens identical with and without the drafter, on four prompts none of the
  benchmark sets holds;
* the share of drafted tokens the server accepts within 0.05 of this engine's eagle3
  chain of the same length (3) on the same prompt ids and the same number of tokens;
* the same file with its vocabulary map shifted by one falls outside that band (the
  check can fail);
* ``python -m gumiho.serve --engine llama.cpp`` exports, starts, answers, and stops on
  Ctrl-C without a traceback.

The engine's chain runs on its float32 torch runtime (its llama.cpp runtime hands no
inner layers to a drafter), the server on the 4-bit file: texts are compared within
one runtime only, the acceptance share across the two."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from gumiho.serving.lifecycle import free_port, start_process, wait_until_serving

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPTS = [  # written for this test: in none of benchmarks/prompts
    "Explain to a ten-year-old why the sky turns orange at sunset.",
    "Write a Python function that returns the n-th Fibonacci number without recursion.",
    "List three ways a small bakery could reduce food waste, one sentence each.",
    "What is the difference between a virus and a bacterium? Answer in a short paragraph.",
]
MAX_NEW = 64
K = 3
BAND = 0.05


def post(url: str, body: dict, timeout: float = 300) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def binary():
    from gumiho.serving.llamacpp_build import ensure_server

    return ensure_server(log=print)


@pytest.fixture(scope="module")
def target():
    from gumiho.loading import load_target

    return load_target(None, device="cpu", dtype="float32", runtime="torch")


@pytest.fixture(scope="module")
def prompt_ids(target):
    return [target.encode([{"role": "user", "content": p}]) for p in PROMPTS]


@pytest.fixture(scope="module")
def drafter_files(tmp_path_factory):
    """The shipped eagle3 drafter's GGUF, and the same with every draft id's target id
    moved one up (a broken vocabulary map)."""
    from gumiho.drafter import Drafter
    from gumiho.formats.eagle3_gguf import write_eagle3_gguf
    from gumiho.formats.gguf_target import default_target_file
    from gumiho.loading import shipped_drafter_path

    folder = tmp_path_factory.mktemp("gguf")
    drafter = Drafter.load(shipped_drafter_path("eagle3"))
    write_eagle3_gguf(drafter, str(folder / "eagle3.gguf"), default_target_file())
    drafter.draft_vocab_ids = drafter.draft_vocab_ids + 1  # the largest id stays inside the vocabulary
    write_eagle3_gguf(drafter, str(folder / "shifted.gguf"), default_target_file())
    return {"eagle3": str(folder / "eagle3.gguf"), "shifted": str(folder / "shifted.gguf")}


def serve_and_ask(binary, kind: str, drafter_file, prompt_ids, log_path) -> dict:
    """One server, the prompts sent as token ids to /completion one at a time: the
    tokens it returns, and its drafted and accepted counts."""
    from gumiho.bench.llamacpp_served import complete
    from gumiho.formats.gguf_target import default_target_file
    from gumiho.serving.llamacpp_command import server_command, stop

    port = free_port()
    command = server_command(binary, default_target_file(), drafter_file, kind, K, port, threads=2)
    process = start_process(command, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_serving(process, url, 120), open(log_path).read()[-2000:]
        tokens, drafted, accepted = [], 0, 0
        for ids in prompt_ids:
            out = complete(url, ids, MAX_NEW)  # greedy, the prompt cache off
            tokens.append(out["tokens"])
            drafted += out["drafted"]
            accepted += out["accepted"]
        return {"tokens": tokens, "drafted": drafted, "accepted": accepted}
    finally:
        stop(process)


@pytest.fixture(scope="module")
def runs(binary, drafter_files, prompt_ids, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs")
    return {name: serve_and_ask(binary, "none" if name == "none" else "eagle3", drafter_files.get(name),
                                prompt_ids, str(log / f"{name}.log"))
            for name in ("none", "eagle3", "shifted")}


@pytest.fixture(scope="module")
def engine_chain(target, prompt_ids, runs):
    """This engine's eagle3 chain of K on the same prompt ids, each run to the length
    the server wrote (so both draft over the same stretch of text)."""
    from gumiho.engine.decode import generate
    from gumiho.loading import load_drafter, shipped_drafter_path
    from gumiho.tree import TreeSettings

    torch.set_num_threads(2)
    drafter = load_drafter(shipped_drafter_path("eagle3"), target, dtype="fp32")
    chain = TreeSettings(total_tokens=K, depth=K, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=False,
                         full_tree_tokens=0)
    drafted = accepted = 0
    for ids, served in zip(prompt_ids, runs["none"]["tokens"]):
        result = generate(target, prompt_ids=ids, drafter=drafter, max_new_tokens=len(served), temperature=0,
                          tree=chain)
        drafted += sum(s.drafted for s in result.steps)
        accepted += sum(s.accepted_length for s in result.steps)
    torch.set_num_threads(1)
    return {"drafted": drafted, "accepted": accepted}


def share(run) -> float:
    return run["accepted"] / run["drafted"]


def test_greedy_tokens_are_the_same_with_and_without_the_drafter(runs):
    assert runs["none"]["drafted"] == 0
    assert runs["eagle3"]["drafted"] > 100
    assert runs["eagle3"]["tokens"] == runs["none"]["tokens"]
    assert all(len(t) > 10 for t in runs["none"]["tokens"])
    assert runs["shifted"]["tokens"] == runs["none"]["tokens"]  # a bad drafter costs speed, never tokens


def test_llamacpp_accepts_what_this_engines_chain_accepts(runs, engine_chain):
    served, ours = share(runs["eagle3"]), share(engine_chain)
    print(f"accepted share: llama-server {served:.3f} ({runs['eagle3']['accepted']}/{runs['eagle3']['drafted']}), "
          f"this engine's chain of {K} {ours:.3f} ({engine_chain['accepted']}/{engine_chain['drafted']}), "
          f"shifted map {share(runs['shifted']):.3f}")
    assert abs(served - ours) <= BAND, (served, ours)


def test_a_shifted_vocabulary_map_falls_outside_the_band(runs, engine_chain):
    assert abs(share(runs["shifted"]) - share(engine_chain)) > BAND


def test_the_command_serves_and_stops_on_ctrl_c(binary, tmp_path):
    from gumiho.loading import shipped_drafter_path

    port = free_port()
    env = dict(os.environ, GUMIHO_CACHE=str(tmp_path / "cache"), GUMIHO_LLAMA_SERVER=str(binary),
               PYTHONPATH=ROOT)
    process = subprocess.Popen([sys.executable, "-m", "gumiho.serve", "--engine", "llama.cpp", "--drafter",
                                shipped_drafter_path("eagle3"), "--port", str(port), "--threads", "2",
                                "--log", str(tmp_path / "server.log")],
                               cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "serving at" in line:
                break
        assert any("serving at" in line for line in lines), "".join(lines)
        answer = post(f"http://127.0.0.1:{port}/v1/chat/completions",
                      {"messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 24, "temperature": 0})
        assert answer["choices"][0]["message"]["content"].strip()
        assert answer["timings"]["draft_n"] > 0
        assert list((tmp_path / "cache" / "serve").glob("llamacpp-eagle3-*.gguf"))  # the export, cached
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines) + rest
    assert process.returncode == 0, output
    assert "stopped." in output and "Traceback" not in output
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
