"""Nothing `gumiho.serve --engine vllm` starts outlives it (issue 71), whatever signal
reaches which process: vLLM runs in a session of its own, so Ctrl-C in the terminal
reaches only the command, which must stop vLLM's whole process group. The engine is a
stand-in (tests/fakes/fake_vllm_python.py) in a stand-in environment named by
GUMIHO_VLLM_ENV: a server whose engine child ignores SIGINT and SIGTERM and is left
behind when the server exits, the hardest case for the stop."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.stop_matrix import STOP_WAYS, stop_and_check, wait_serving

from gumiho.serving import vllm_env
from gumiho.serving.lifecycle import free_port

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "fake_vllm_python.py"


@pytest.fixture
def stand_in(tmp_path):
    """A vLLM environment that looks built (its ready record names this recipe, its
    plugin record this plugin), whose python is the stand-in; a target folder."""
    env_dir = tmp_path / "vllm-env"
    (env_dir / "bin").mkdir(parents=True)
    python = vllm_env.env_python(env_dir)
    python.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    python.chmod(0o755)
    (env_dir / vllm_env.READY_FILE).write_text(json.dumps({"recipe": vllm_env._recipe()}))
    (env_dir / vllm_env.PLUGIN_FILE).write_text(json.dumps({"fingerprint": vllm_env.plugin_fingerprint()}))
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text("{}")  # used as given: the stand-in reads nothing
    env = dict(os.environ, PYTHONPATH=str(ROOT), GUMIHO_CACHE=str(tmp_path / "cache"),
               GUMIHO_VLLM_ENV=str(env_dir), GUMIHO_TEST_SERVER_ARGS=str(tmp_path / "pids.jsonl"))
    return env, target, tmp_path / "pids.jsonl"


@pytest.mark.parametrize("how", STOP_WAYS)
def test_nothing_is_left_running_after_the_command_stops(stand_in, how):
    env, target, pids_file = stand_in
    process = subprocess.Popen([sys.executable, "-m", "gumiho.serve", "--engine", "vllm", "--drafter", "none",
                                "--target", str(target), "--port", str(free_port())], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_serving(process)
    started = json.loads(pids_file.read_text().splitlines()[-1])
    stop_and_check(process, [started["pid"], started["engine_pid"]], how)
