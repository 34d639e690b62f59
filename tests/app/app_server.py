"""One real app server (``python app.py`` with the default model) shared by the
browser and concurrency tests: started on a free port the first time a test
asks for it, stopped when the test process exits."""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class AppServer:
    url: str
    proc: subprocess.Popen
    first_page_s: float  # from starting the command to the first page served
    config_at_first_page: str  # the app config served with that first page
    log_path: str

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-4000:]


_server: AppServer | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", errors="replace")


def running_app(timeout: float = 120.0) -> AppServer:
    global _server
    if _server is not None and _server.proc.poll() is None:
        return _server
    # The server's operator's choice, as GUMIHO_RUNTIME=torch python app.py: the default
    # model on the torch runtime only (the race runs float32 by default either way; this
    # spares the server a second runtime's load and warm-up beside the browser).
    _server = start_app({"GUMIHO_RUNTIME": os.environ.get("GUMIHO_RUNTIME", "torch")}, timeout)
    atexit.register(_stop, _server.proc)
    return _server


def start_app(extra_env: dict, timeout: float = 120.0) -> AppServer:
    """``python app.py`` on a free port with ``extra_env`` (a value None: unset), up to
    its first page; the caller stops it (stop_app)."""
    port = _free_port()
    env = dict(os.environ, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    # One torch thread leaves the other core to the browser and the test clients.
    env.setdefault("OMP_NUM_THREADS", "1")
    for key, value in extra_env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    log = tempfile.NamedTemporaryFile("w", prefix="gumiho-app-", suffix=".log", delete=False)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    first, config = None, ""
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with {proc.returncode}:\n{open(log.name).read()[-3000:]}")
        try:
            status, _ = _get(url)
            if status == 200:
                first = time.perf_counter() - t0
                config = _get(url + "config")[1]
                break
        except OSError:
            pass
        time.sleep(0.25)
    if first is None:
        _stop(proc)
        raise RuntimeError(f"no page within {timeout:.0f} s:\n{open(log.name).read()[-3000:]}")
    return AppServer(url, proc, first, config, log.name)


def stop_app(server: AppServer) -> None:
    _stop(server.proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def server_rss_mb(server: AppServer) -> float:
    """Resident memory of the app process, in MB (Linux /proc)."""
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")
