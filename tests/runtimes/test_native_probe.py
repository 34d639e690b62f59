"""The probe before trust (gumiho.runtimes.native_probe): a trial in a child process,
its death by a signal named in words, its verdict kept per CPU, build, file and
setting, and tried again when one of them changes."""
import os
import signal
import subprocess
import sys

import pytest

from gumiho.runtimes import native_probe
from gumiho.runtimes.native_probe import Outcome, first_usable, probe, signal_name


@pytest.fixture(autouse=True)
def cache(tmp_path, library_paths):
    library_paths(cache_root=tmp_path)
    return tmp_path


def child(code: str):
    """A trial that runs ``code`` in a child Python, counting its runs."""
    def run() -> Outcome:
        run.count += 1
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        return Outcome(done.returncode, done.stderr.strip()[-200:])
    run.count = 0
    return run


DIE = "import os, signal; os.kill(os.getpid(), signal.{})"


@pytest.mark.parametrize("name, words", [("SIGILL", "illegal instruction"), ("SIGSEGV", "segmentation fault")])
def test_a_child_that_dies_is_named_and_the_verdict_kept(name, words):
    trial = child(DIE.format(name))
    verdict = probe("stand-in", {"build": "b1"}, trial)
    assert not verdict.usable and verdict.signal == name and not verdict.cached
    assert name in verdict.reason() and words in verdict.reason().lower()
    again = probe("stand-in", {"build": "b1"}, trial)
    assert again.cached and not again.usable and again.signal == name
    assert trial.count == 1  # read from the cache, not run again


def test_a_usable_runtime_is_probed_once():
    trial = child("print('ok')")
    assert probe("stand-in", {"build": "b1"}, trial).usable
    assert probe("stand-in", {"build": "b1"}, trial).usable
    assert trial.count == 1


def test_a_changed_build_file_setting_or_cpu_probes_again(monkeypatch):
    trial = child("pass")
    probe("stand-in", {"build": "b1", "file": "f1"}, trial, {"repack": True})
    probe("stand-in", {"build": "b2", "file": "f1"}, trial, {"repack": True})
    probe("stand-in", {"build": "b2", "file": "f2"}, trial, {"repack": True})
    probe("stand-in", {"build": "b2", "file": "f2"}, trial, {"repack": False})
    assert trial.count == 4
    other_cpu = {**native_probe.cpu_signature(), "flags": ["sse2"]}
    monkeypatch.setattr(native_probe, "cpu_signature", lambda: other_cpu)
    probe("stand-in", {"build": "b2", "file": "f2"}, trial, {"repack": False})
    assert trial.count == 5


def test_a_failure_that_is_not_a_signal_is_reported_and_not_kept():
    trial = child("import sys; print('no such file', file=sys.stderr); sys.exit(3)")
    verdict = probe("stand-in", {"build": "b1"}, trial)
    assert not verdict.usable and not verdict.signal and "code 3" in verdict.detail
    assert "no such file" in verdict.detail
    probe("stand-in", {"build": "b1"}, trial)
    assert trial.count == 2


def test_a_setting_that_dies_gives_way_to_the_next():
    """The ladder: the preferred setting dies by a signal, the next one runs."""
    trials = {True: child(DIE.format("SIGILL")), False: child("pass")}
    verdict, seen = first_usable("stand-in", {"build": "b1"}, lambda s: trials[s["repack"]],
                                 [{"repack": True}, {"repack": False}])
    assert verdict.usable and verdict.setting == {"repack": False}
    assert [v.signal for v in seen] == ["SIGILL", ""]


def test_the_verdict_file_is_written_whole(cache):
    probe("stand-in", {"build": "b1"}, child(DIE.format("SIGILL")))
    files = list((cache / "probes").iterdir())
    assert len(files) == 1 and files[0].suffix == ".json" and "stand-in" in files[0].name


def test_signal_names():
    assert signal_name(-signal.SIGILL) == "SIGILL"
    assert signal_name(-signal.SIGSEGV) == "SIGSEGV"
    assert signal_name(0) == "" and signal_name(1) == "" and signal_name(None) == ""


def test_the_cpu_signature_reads_this_machine():
    cpu = native_probe.cpu_signature()
    assert cpu["machine"]
    if os.path.exists("/proc/cpuinfo"):
        assert cpu["flags"] and cpu["flags"] == sorted(cpu["flags"])
