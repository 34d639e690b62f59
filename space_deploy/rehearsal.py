"""Rehearse a Space's start here, on the files an upload would send
(``python -m space_deploy NAME --rehearse``; tests/space_deploy/test_space_rehearsal.py).

What a Space does with an upload, done the same way on this machine:

1. **Install.** A new virtual environment gets the upload's requirements.txt with
   ``pip install --only-binary=:all:``: a package with no wheel fails the install
   instead of compiling (pip's cache may serve the wheels, as a Space's builder
   would download them).
2. **Start.** ``python app.py`` in the upload's folder, as a Space starts it:
   SPACE_ID set, a home and caches of its own (empty), the hub offline, no package
   index, and the network cut: a ``sitecustomize`` module on the server's path
   (space_deploy/rehearsal_site) refuses every connection to an address that is not this
   machine's loopback and writes it down, so an attempt shows in the report instead
   of passing unnoticed.
3. **Use.** Wait for the page, then one race and one walkthrough through the API,
   as a visitor's client sends them: the race's two texts must be identical
   (greedy), the walkthrough must show verify steps. The server's log must hold no
   traceback.

On ZeroGPU (``zero=True``) the GPU is lent by Hugging Face's device API, which
this machine does not have; the `spaces` package runs in its ZeroGPU mode against
a stand-in (:class:`StandInDeviceApi`) that counts the GPU calls asked of it, with
the duration of each, and answers each with an exhausted quota: what a visitor sees
then is what the page shows. No job runs on a GPU here (research/gpu_check.py does,
on a machine with one).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

RACE_PROMPT = "Write a haiku about the sea."
WALK_PROMPT = "Explain in two sentences why the sky is blue."
READY_LINE = re.compile(r"model ready in ([\d.]+) s")
PAGE_TIMEOUT_S = 300

# The server's network cut: a sitecustomize module, imported by the server's Python at
# start-up from this folder (put on its PYTHONPATH; never part of the upload).
CUT_NETWORK_SITE = Path(__file__).resolve().parent / "rehearsal_site"


class RehearsalError(Exception):
    """A step that could not run at all (said in one line)."""


@dataclass
class Started:
    page_s: float = 0.0  # start to the page answering
    ready_s: Optional[float] = None  # start to the model's "ready" line in the log
    log: str = ""
    tracebacks: int = 0
    blocked: list = field(default_factory=list)  # connections the cut refused


@dataclass
class Report:
    space_dir: str
    hardware: str
    upload_bytes: int
    install_s: float = 0.0
    resolve_note: str = ""
    started: Optional[Started] = None
    first_reply_s: float = 0.0  # start to the first race's answer
    race: dict = field(default_factory=dict)
    walk: dict = field(default_factory=dict)
    zero_gpu: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    work: str = ""  # the rehearsal's venv, home and the server's log (server.log)

    @property
    def passed(self) -> bool:
        return not self.problems

    def text(self) -> str:
        s = self.started or Started()
        lines = [f"Rehearsal of the upload in {self.space_dir} ({self.hardware}):",
                 f"  upload: {self.upload_bytes / 1e6:.1f} MB",
                 "  install (wheels only, new venv): "
                 + (f"{self.install_s:.0f} s" if self.install_s else "not run (an environment installed before)")]
        if self.resolve_note:
            lines.append(f"  {self.resolve_note}")
        lines.append(f"  start to page: {s.page_s:.1f} s; to model ready: "
                     + (f"{s.ready_s:.1f} s" if s.ready_s is not None else "not seen"))
        if self.race.get("ok"):
            r = self.race
            lines.append(f"  start to first race answered: {self.first_reply_s:.1f} s; texts identical: "
                         f"{r['vanilla']['text'] == r['gumiho']['text']}; {r['gumiho']['new_tokens']} tokens; "
                         f"tau {r['gumiho']['tau']:.2f}; vanilla {r['vanilla']['tokens_per_s']:.1f} tok/s, "
                         f"gumiho {r['gumiho']['tokens_per_s']:.1f} tok/s, speedup "
                         f"{'%.2fx' % r['speedup'] if r['speedup'] else 'not measured'} "
                         f"({r['runtime']}, {r['weights']})")
        if self.walk.get("ok"):
            heads = sorted({n["head"] for st in self.walk["steps"] for n in st["nodes"]} - {"root"})
            lines.append(f"  walkthrough: {self.walk['verify_steps']} verify steps, {self.walk['new_tokens']} tokens, "
                         f"heads seen: {', '.join(heads)}")
        if self.zero_gpu:
            z = self.zero_gpu
            lines.append(f"  ZeroGPU (stand-in device API): {z['schedules']} GPU calls asked for a race and a "
                         f"walkthrough, durations {z['durations']} s; a visitor out of quota reads: "
                         f"{z['message']!r}")
        lines.append(f"  connections refused by the cut: {len(s.blocked)}"
                     + (f" ({', '.join(s.blocked[:5])})" if s.blocked else ""))
        lines.append(f"  tracebacks in the server's log: {s.tracebacks}")
        lines.append("passed" if self.passed else "FAILED: " + "; ".join(self.problems))
        return "\n".join(lines)


# ----------------------------------------------------------------------------- steps


def make_venv(where: Path, python: str = sys.executable) -> Path:
    subprocess.run([python, "-m", "venv", str(where)], check=True, capture_output=True)
    return where / "bin" / "python"


def pip(python, args: list, failure: str) -> None:
    """``python -m pip ARGS``, an index that cannot be reached (PyTorch's, from here)
    asked once, briefly; a failure raised as ``failure``: pip's ERROR lines."""
    env = dict(os.environ, PIP_RETRIES="0", PIP_TIMEOUT="10", PIP_DISABLE_PIP_VERSION_CHECK="1")
    out = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("ERROR")] or out.stderr.splitlines()[-3:]
        raise RehearsalError(f"{failure}: " + " | ".join(errors)[:600])


def install(venv_python: Path, requirements: Path) -> float:
    """``pip install --only-binary=:all: -r requirements``; seconds taken."""
    t0 = time.monotonic()
    pip(venv_python, ["install", "-q", "--only-binary=:all:", "-r", str(requirements)],
        "the wheels-only install failed")
    return time.monotonic() - t0


def resolve_for(requirements: Path, python_version: str) -> int:
    """Whether every package of ``requirements`` has a wheel for CPython
    ``python_version`` on a Space's Linux (x86_64, glibc 2.28), asked of pip's
    resolver without installing: the number of packages it would install."""
    platforms = [f"manylinux_2_{v}_x86_64" for v in range(28, 16, -1)] + ["manylinux2014_x86_64"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        args = ["install", "--dry-run", "--ignore-installed", "--only-binary=:all:", "--python-version", python_version,
                "--target", str(Path(tmp) / "t"), "--report", str(report), "-q", "-r", str(requirements)]
        for p in platforms:
            args += ["--platform", p]
        pip(sys.executable, args, f"no wheels for Python {python_version}")
        return len(json.loads(report.read_text())["install"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandInDeviceApi:
    """Hugging Face's ZeroGPU device API as the `spaces` package calls it: start-up
    is acknowledged; every GPU call (``/schedule``) is written down with the duration
    it asks for and answered as a visitor out of quota is answered (HTTP 429)."""

    def __init__(self):
        self.schedules: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                path, _, query = self.path.partition("?")
                if path == "/schedule":
                    outer.schedules.append(dict(p.split("=", 1) for p in query.split("&") if "=" in p))
                    body = json.dumps({"left": 0, "wait": 3600}).encode()
                    self.send_response(429)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class SpaceProcess:
    """``python app.py`` in the upload's folder, started as a Space starts it."""

    def __init__(self, space_dir: Path, venv_python: Path, space_id: str, work: Path, extra_env: Optional[dict] = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        site = CUT_NETWORK_SITE
        self.blocked_log = work / "blocked.txt"
        self.blocked_log.write_text("")
        home = work / "home"
        home.mkdir(exist_ok=True)
        env = {"PATH": f"{venv_python.parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
               "SPACE_ID": space_id, "SYSTEM": "spaces", "GRADIO_SERVER_NAME": "127.0.0.1",
               "GRADIO_SERVER_PORT": str(self.port), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "PIP_NO_INDEX": "1", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": str(site), "REHEARSAL_BLOCKED_LOG": str(self.blocked_log),
               "HF_HOME": str(home / "hf"), "XDG_CACHE_HOME": str(home / "cache"),
               "OMP_WAIT_POLICY": "PASSIVE"}
        env.update(extra_env or {})
        self.log_path = work / "server.log"
        self.log_file = open(self.log_path, "w", encoding="utf-8")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([str(venv_python), "app.py"], cwd=space_dir, env=env, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_page(self) -> float:
        while time.monotonic() - self.t0 < PAGE_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RehearsalError(f"app.py exited ({self.proc.returncode}) before serving: "
                                     + " | ".join(self.log().strip().splitlines()[-3:])[:600])
            try:
                with urllib.request.urlopen(self.url + "/", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - self.t0
            except OSError:
                pass
            time.sleep(0.5)
        raise RehearsalError(f"the page was not up after {PAGE_TIMEOUT_S} s")

    def stop(self) -> Started:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log_file.close()
        log = self.log()
        m = READY_LINE.search(log)
        blocked = [ln for ln in self.blocked_log.read_text().splitlines() if ln]
        return Started(log=log, tracebacks=log.count("Traceback (most recent call last)"), blocked=blocked,
                       ready_s=float(m.group(1)) if m else None)


def call(url: str, endpoint: str, *args, **kwargs) -> dict:
    """One API call as a visitor's client makes it (gradio_client, from this process:
    the loopback is not cut)."""
    from gradio_client import Client

    try:
        client = Client(url, verbose=False, download_files=False)
        try:
            return client.predict(*args, api_name=endpoint, **kwargs)
        finally:
            client.close()
    except Exception as e:  # the server's fault, reported as such (its log says more)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {"ok": False, "message": f"the {endpoint} call failed: {first[:300]}"}


# ----------------------------------------------------------------------------- the rehearsal


def _check_race(report: Report, race: dict) -> None:
    if not race.get("ok"):
        report.problems.append(f"the race was refused: {race.get('message')}")
    elif race["vanilla"]["text"] != race["gumiho"]["text"]:
        report.problems.append("the race's two texts differ (greedy decoding must give identical texts)")


def _check_walk(report: Report, walk: dict) -> None:
    if not walk.get("ok"):
        report.problems.append(f"the walkthrough was refused: {walk.get('message')}")
    elif not walk["steps"]:
        report.problems.append("the walkthrough has no verify step")


def _check_log(report: Report, started: Started) -> None:
    if started.tracebacks:
        report.problems.append(f"{started.tracebacks} traceback(s) in the server's log")


def rehearse(space_dir: Path, space_id: str, hardware: str, work: Optional[Path] = None,
             venv_python: Optional[Path] = None, start_requirements: Optional[bytes] = None,
             resolve_python: Optional[str] = None) -> Report:
    """The whole rehearsal of the upload in ``space_dir`` for ``hardware`` (module
    docstring). ``venv_python``: an environment a previous rehearsal installed, to
    start again without a new install; ``work``: where the venv, home and logs go.
    ``resolve_python``: first ask pip's resolver whether the upload's requirements
    are all wheels for that Python; ``start_requirements``: what to install for the
    start instead of the upload's own, where those cannot run here (ZeroGPU's CUDA
    build: space_deploy.contents.rehearsal_options)."""
    space_dir = Path(space_dir).resolve()
    if not (space_dir / "app.py").is_file() or not (space_dir / "requirements.txt").is_file():
        raise RehearsalError(f"{space_dir} holds no upload (app.py and requirements.txt); write one with "
                             "`python -m space_deploy NAME --dry-run --out DIR`.")
    work = Path(work or tempfile.mkdtemp(prefix="gumiho-rehearsal-"))
    work.mkdir(parents=True, exist_ok=True)
    size = sum(f.stat().st_size for f in space_dir.rglob("*") if f.is_file())
    report = Report(str(space_dir), hardware, size, work=str(work))
    zero = hardware.startswith("zero-")
    requirements = space_dir / "requirements.txt"
    if resolve_python:
        n = resolve_for(requirements, resolve_python)
        report.resolve_note = f"the requirements resolve to {n} wheels for Python {resolve_python} (pip's resolver)"
    if start_requirements is not None:
        requirements = work / "requirements-start.txt"
        requirements.write_bytes(start_requirements)
        report.resolve_note += "; the start below installs the CPU build of the same pins"
    if venv_python is None:
        venv_python = make_venv(work / "venv")
        report.install_s = install(venv_python, requirements)
    extra = {}
    device_api = None
    if zero:
        device_api = StandInDeviceApi()
        extra = {"SPACES_ZERO_GPU": "true", "SPACES_ZERO_DEVICE_API_URL": device_api.url,
                 "REHEARSAL_CPU_TORCH_AS_ZEROGPU": "1"}
    server = SpaceProcess(space_dir, venv_python, space_id, work, extra)
    try:
        page_s = server.wait_for_page()
        report.race = call(server.url, "/race", RACE_PROMPT, 64)
        report.first_reply_s = time.monotonic() - server.t0
        report.walk = call(server.url, "/walkthrough", WALK_PROMPT, 24)
    finally:
        started = server.stop()
        started.page_s = page_s if "page_s" in locals() else 0.0
        report.started = started
        if device_api is not None:
            device_api.close()
    _check_log(report, started)
    if zero:
        schedules = device_api.schedules
        message = report.race.get("message", "")
        report.zero_gpu = {"schedules": len(schedules),
                           "durations": [int(s.get("durationSeconds", 0)) for s in schedules],
                           "message": message}
        if len(schedules) != 2:
            report.problems.append(f"{len(schedules)} GPU calls for one race and one walkthrough (want 2: one each)")
        if report.race.get("ok") or "quota" not in message.lower():
            report.problems.append(f"a visitor out of GPU quota read {message!r}")
    else:
        _check_race(report, report.race)
        _check_walk(report, report.walk)
    return report
