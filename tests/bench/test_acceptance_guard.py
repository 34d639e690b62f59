"""The guard on what the shipped drafters accept (gumiho.bench.acceptance): measured
now on the real default model, each shipped drafter's mean accepted length and
acceptance by position hold within the stated tolerances of the recorded baseline
(benchmarks/acceptance_baseline.json, written by `python -m gumiho.bench.acceptance
--out`); and the check fails for a drafter that drafts worse and for numbers outside
its tolerances."""
from __future__ import annotations

import json
import os

import pytest
import torch

from gumiho.bench import acceptance
from gumiho.loading import load_target
from helpers import ROOT

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("machine_threads")]

BASELINE = os.path.join(ROOT, "benchmarks", "acceptance_baseline.json")


@pytest.fixture(scope="module")
def target():
    return load_target(None, runtime="torch")


def test_the_shipped_drafters_accept_as_recorded(target):
    with open(BASELINE, encoding="utf-8") as f:
        baseline = json.load(f)
    assert set(baseline["drafters"]) == set(acceptance.KINDS)
    measured = acceptance.measure(target, acceptance.shipped_drafters(target), acceptance.prompts())
    print(json.dumps(measured, indent=1))
    assert acceptance.compare(measured, baseline["drafters"]) == []


def test_the_guard_fails_a_drafter_that_drafts_worse(target):
    with open(BASELINE, encoding="utf-8") as f:
        baseline = json.load(f)["drafters"]
    drafter = acceptance.shipped_drafters(target, ("gumiho",))["gumiho"]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # every weight nudged by a quarter of its own spread
        for p in drafter.parameters():
            if p.dim() > 1:
                p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.25 * p.float().std().to(p.dtype))
    worse = acceptance.measure(target, {"gumiho": drafter}, acceptance.prompts(n=3))
    problems = acceptance.compare(worse, {"gumiho": baseline["gumiho"]})
    assert any("mean accepted length" in p for p in problems), (worse, problems)


def test_the_tolerances_are_the_stated_ones():
    base = {"d": {"mean_accepted_length": 2.0, "acceptance_by_position": [0.6, 0.4, 0.2, 0.04]}}

    def with_(mean, positions):
        return {"d": {"mean_accepted_length": mean, "acceptance_by_position": positions}}

    assert acceptance.compare(with_(2.09, [0.6, 0.4, 0.2, 0.04]), base) == []  # within 5%
    assert acceptance.compare(with_(1.91, [0.46, 0.31, 0.151, 0.0]), base) == []  # each above 75%; 0.04 too rare
    assert "mean accepted length" in acceptance.compare(with_(2.11, [0.6, 0.4, 0.2, 0.04]), base)[0]
    assert "position 2" in acceptance.compare(with_(2.0, [0.6, 0.29, 0.2, 0.04]), base)[0]
    assert acceptance.compare({}, base) == ["d: not measured"]
