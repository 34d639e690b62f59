"""The Space's upload, rehearsed end to end (space_deploy/rehearsal.py): the files
`python -m space_deploy --dry-run --out DIR` writes are installed wheels-only in a new
virtual environment and started as a Space starts them, with the network cut; one
race (texts identical) and one walkthrough answer through the API, with no
traceback in the server's log. Then the same upload on ZeroGPU as far as a CPU can
emulate it: its packages resolve to wheels for ZeroGPU's Python, and with `spaces` in
its ZeroGPU mode against a stand-in device API, a race and a walkthrough are one GPU
call each, and a visitor out of quota reads the quota's message.

Each report is printed (pytest -s shows it): install time, start to page and to the
first race's answer, and the race's figures (docs/space.md quotes them)."""
from __future__ import annotations

import pytest

from space_deploy import upload as deploy
from space_deploy.rehearsal import CUT_NETWORK_SITE, RehearsalError, rehearse

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def cpu_rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("upload") / "space"
    assert deploy.main(["your-name/gumiho", "--dry-run", "--hardware", "cpu-basic", "--out", str(out)]) == 0
    work = tmp_path_factory.mktemp("rehearsal")
    report = rehearse(out, "your-name/gumiho", "cpu-basic", work=work)
    print("\n" + report.text())
    return report, work


def test_the_upload_installs_wheels_only_and_starts_offline_and_serves(cpu_rehearsal):
    report, _ = cpu_rehearsal
    assert report.passed, report.text()
    assert report.install_s > 0 and report.upload_bytes < 250e6
    assert report.started.blocked == [] and report.started.tracebacks == 0
    race = report.race
    assert race["ok"] and race["vanilla"]["text"] == race["gumiho"]["text"] and race["gumiho"]["new_tokens"] > 0
    assert race["runtime"] == "torch"  # the 4-bit runtime is not on a Space
    walk = report.walk
    assert walk["ok"] and walk["verify_steps"] > 0
    # The walkthrough's tree is the paper's: both head families draft.
    assert {n["head"] for s in walk["steps"] for n in s["nodes"]} >= {"serial", "mlp"}


def test_the_zerogpu_upload_asks_one_gpu_call_per_run_and_says_when_the_quota_is_out(cpu_rehearsal,
                                                                                    tmp_path_factory):
    _, work = cpu_rehearsal
    out = tmp_path_factory.mktemp("zero-upload") / "space"
    assert deploy.main(["your-name/gumiho", "--dry-run", "--hardware", "zero-a10g", "--out", str(out)]) == 0
    report = rehearse(out, "your-name/gumiho", "zero-a10g", work=tmp_path_factory.mktemp("zero"),
                      venv_python=work / "venv" / "bin" / "python", **deploy.rehearsal_options("zero-a10g"))
    print("\n" + report.text())
    assert report.passed, report.text()
    assert "resolve to" in report.resolve_note and "Python 3.12" in report.resolve_note
    z = report.zero_gpu
    assert z["schedules"] == 2 and all(d > 0 for d in z["durations"])
    assert z["message"].startswith("ZeroGPU quota exceeded")
    assert report.started.tracebacks == 0


def test_a_folder_without_an_upload_is_refused_in_words(tmp_path):
    with pytest.raises(RehearsalError, match="holds no upload"):
        rehearse(tmp_path, "your-name/gumiho", "cpu-basic")


def test_the_cut_refuses_and_records_what_is_not_loopback(tmp_path, monkeypatch):
    """The server's sitecustomize, run here (the socket module's functions put back after)."""
    import socket

    log = tmp_path / "blocked.txt"
    monkeypatch.setenv("REHEARSAL_BLOCKED_LOG", str(log))
    saved = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
    try:
        site = CUT_NETWORK_SITE / "sitecustomize.py"
        exec(compile(site.read_text(), str(site), "exec"), {"__name__": "sitecustomize"})
        with pytest.raises(OSError, match="network cut"):
            socket.getaddrinfo("pypi.org", 443)
        with socket.socket() as s, pytest.raises(OSError, match="network cut"):
            s.connect(("93.184.216.34", 80))
        assert socket.getaddrinfo("127.0.0.1", 80)  # loopback passes
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = saved
    assert log.read_text().splitlines() == ["pypi.org", "('93.184.216.34', 80)"]
