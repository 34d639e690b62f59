"""How busy the machine was while something was timed: the share of its CPUs that
went to other processes (and, on a virtual machine, to other guests: steal).

Why this measure. A speedup is a ratio of two wall times taken on one machine; work
beside them slows both, but not alike (a decoder whose threads wait for each other
at every layer loses more to a neighbour than one that does not), so a ratio timed on
a busy machine can reverse the lesson of a quiet one. What the timed work shares the
CPUs with is what matters, and the kernel counts it: over an interval, every CPU's
busy time (/proc/stat: user, nice, system, irq, softirq, steal) less this process's
own (os.times()) is the others' part. The load average says how many wanted a CPU,
but trails by a minute and counts this process too; it is recorded beside, not used.

Where /proc/stat is missing (not Linux), the reading is None: unknown, never "quiet".
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Optional

# Others' share of the CPUs above which a timed ratio is called unreliable, placed from
# research/race_under_load.py (benchmarks/busy/, 2 cores): with others at 8-9% every race's
# speedup stayed within 4% of the quiet one's (float32 and 4-bit); at 35-38% single races moved
# by up to 25% (a 4-bit race from 0.71x to 0.53x), and at 43-80% by up to three times (0.69x
# to 2.08x). 20% lies between the loads that never moved a race by 10% and those that did,
# nearer the safe side.
BUSY_SHARE = 0.20

BUSY_NOTE = ("other processes used {share:.0%} of this machine's CPUs while it ran (above {limit:.0%}), so "
             "its timings may not be those of a quiet machine")

# Why a busy machine's speedup is not a quiet one's, as measured (research/race_under_load.py).
BUSY_EFFECT = ("On a busy CPU every forward also waits for its threads to get a core back, a delay per forward "
               "that favours the decoder making fewer forwards, so speedups read high (benchmarks/busy/).")

# Fields of /proc/stat's "cpu" line (in clock ticks): user nice system idle iowait irq softirq steal ...
# guest and guest_nice are already inside user and nice.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
_ALL_FIELDS = (0, 1, 2, 3, 4, 5, 6, 7)


@dataclass
class LoadReading:
    """What the machine did during one interval."""

    seconds: float  # wall time of the interval
    cpus: int  # CPUs the kernel counts
    others_share: float  # share of all CPUs' time used by other processes and other guests (steal)
    own_share: float  # share of all CPUs' time used by this process (every thread)
    steal_share: float  # of others_share, what the hypervisor gave other guests
    load_average: float  # the 1-minute load average at the end (this process included)

    @property
    def busy(self) -> bool:
        return self.others_share > BUSY_SHARE

    def note(self) -> str:
        """One clause for a warning ("" when the machine was quiet enough)."""
        return BUSY_NOTE.format(share=self.others_share, limit=BUSY_SHARE) if self.busy else ""

    def as_record(self) -> dict:
        out = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["busy"] = self.busy
        out["busy_above"] = BUSY_SHARE
        return out


def _cpu_ticks(stat_path: str) -> Optional[tuple[int, int, int]]:
    """(busy, all, steal) clock ticks of every CPU since boot; None where unreadable."""
    try:
        with open(stat_path) as f:
            line = f.readline().split()
    except OSError:
        return None
    if not line or line[0] != "cpu" or len(line) < 9:
        return None
    values = [int(v) for v in line[1:9]]
    return sum(values[i] for i in _BUSY_FIELDS), sum(values[i] for i in _ALL_FIELDS), values[7]


def _own_ticks() -> float:
    t = os.times()
    return (t.user + t.system) * os.sysconf("SC_CLK_TCK")


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


class LoadMeter:
    """Start it before the timed work, read it after: ``reading()`` covers the time
    since ``start()`` (or since the meter was made)."""

    def __init__(self, stat_path: str = "/proc/stat"):
        self._stat = stat_path
        self.start()

    def start(self) -> "LoadMeter":
        self._t0 = time.monotonic()
        self._ticks0 = _cpu_ticks(self._stat)
        self._own0 = _own_ticks()
        return self

    def reading(self) -> Optional[LoadReading]:
        ticks = _cpu_ticks(self._stat)
        if ticks is None or self._ticks0 is None:
            return None
        busy, every, steal = (b - a for a, b in zip(self._ticks0, ticks))
        own = _own_ticks() - self._own0
        if every <= 0:
            return None  # an interval shorter than a clock tick tells nothing
        cpus = os.cpu_count() or 1
        return LoadReading(seconds=time.monotonic() - self._t0, cpus=cpus,
                           others_share=min(1.0, max(0.0, (busy - own) / every)),
                           own_share=min(1.0, max(0.0, own / every)), steal_share=max(0.0, steal / every),
                           load_average=_load_average())


__all__ = ["BUSY_EFFECT", "BUSY_NOTE", "BUSY_SHARE", "LoadMeter", "LoadReading"]
