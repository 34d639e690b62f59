"""The classroom load test at a small scale (benchmarks/classroom_load.py runs it at a
class's): a real app server with recorded examples, eight visitors clicking an
example and three asking for live races of their own, all at once."""
from __future__ import annotations

import pytest

from classroom import run

pytestmark = pytest.mark.slow

def test_a_small_class_is_served_at_once_and_in_line():
    out = run(visitors=8, live=3, tokens=16, deadline_s=600, env={"GUMIHO_RUNTIME": "torch"})
    assert out["visitors_refused"] == 0 and out["live_refused"] == 0, out["refusal_messages"]
    # Every click on an example is answered from its recording, not computed again.
    assert out["visitors_from_recording"] == 8
    # With three live races on the two cores at the same time (the slowest of the class's
    # answers is under 5 s at a class's scale on a quiet machine; here the suite's load
    # is around it).
    assert out["visitor_seconds"]["slowest"] < 20
    assert all(out["live_texts_identical"]), out
    assert out["server_rss_mb"]["ratio"] < 1.5, out["server_rss_mb"]
