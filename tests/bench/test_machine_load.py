"""How busy the machine was (gumiho.bench.machine_load): read from /proc/stat-shaped
counters, a spinning process beside the reader is counted as the others' share, and a
busy reading is named in the benchmark's warnings (the race's: tests/app/views/test_app_render.py)."""
import subprocess
import sys
import time

import pytest

from gumiho.bench import machine_load
from gumiho.bench.cli import busy_warning
from gumiho.bench.machine_load import BUSY_SHARE, LoadMeter, LoadReading


def stat_line(user, nice, system, idle, iowait=0, irq=0, softirq=0, steal=0):
    return f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\ncpu0 1 1 1 1\n"


def test_the_others_share_is_the_busy_time_not_this_processs(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text(stat_line(100, 0, 50, 1000))
    monkeypatch.setattr(machine_load, "_own_ticks", lambda: 0.0)
    meter = LoadMeter(str(stat))
    # 200 ticks pass: 60 busy in user and system, 20 stolen by the hypervisor, of which this process used 30.
    stat.write_text(stat_line(140, 0, 70, 1120, steal=20))
    monkeypatch.setattr(machine_load, "_own_ticks", lambda: 30.0)
    r = meter.reading()
    assert r.others_share == pytest.approx((60 + 20 - 30) / 200)
    assert r.own_share == pytest.approx(30 / 200) and r.steal_share == pytest.approx(20 / 200)
    assert r.busy == (r.others_share > BUSY_SHARE)


def test_unreadable_counters_read_as_unknown_not_quiet(tmp_path):
    assert LoadMeter(str(tmp_path / "missing")).reading() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_spinning_process_beside_is_counted_and_named():
    hog = subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        meter = LoadMeter()
        time.sleep(1.5)
        r = meter.reading()
    finally:
        hog.kill()
        hog.wait()
    # One spinning process takes one CPU: at least a little under 1 / cpus of the machine.
    assert r.others_share > 0.8 / r.cpus, r
    assert r.own_share < 0.1, r


def busy(share: float) -> LoadReading:
    return LoadReading(seconds=5.0, cpus=2, others_share=share, own_share=0.4, steal_share=0.0, load_average=3.5)


def test_the_benchmark_warns_of_a_busy_machine_only():
    assert busy_warning(None) == "" and busy_warning(busy(0.01).as_record()) == ""
    words = busy_warning(busy(0.5).as_record())
    assert "busy" in words and "50%" in words and "quiet machine" in words
