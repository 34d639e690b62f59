"""A class on one Space: the model thread's line (place and expected wait), recorded
examples answered at once and said to be recorded, live runs shared by id, and a
recording made with another setup refused. A tiny random-weight target; the real
model's recordings are exercised by the load test (tests/app/replays/test_classroom_load.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time

import pytest
from test_app_render import TOK

from app.core.forms import COPY_DEFAULT, DEVICE_TREE, SIZED_SHAPE, RaceForm, as_given, parse_request
from app.core.worker import ModelThread, Place, waiting_text
from app.models.hub import ModelHub, Resolved, _random_drafter
from app.replays import LIVE, RECORDED, Recordings, Replays, SharedRuns, request_key, setup_of
from app.views.render import render_result
from app.web import layout
from app.web.record import example_requests
from helpers import tiny_target

# ----------------------------------------------------------------------------- the line


def test_a_waiting_job_knows_its_place_and_its_expected_wait():
    thread = ModelThread(max_waiting=10)
    gate = threading.Event()
    running = thread.submit(gate.wait)
    time.sleep(0.05)  # the first job is on the thread
    queued = [thread.submit(lambda: None) for _ in range(3)]
    assert thread.place(running) == Place(0, 0.0)
    # Nothing measured yet: each run is expected to take the first guess.
    first, third = thread.place(queued[0]), thread.place(queued[2])
    assert (first.ahead, third.ahead) == (1, 3)
    assert third.wait_s > first.wait_s > 0
    queued[1].cancel()  # a visitor who left: the ones behind move up
    assert thread.place(queued[2]).ahead == 2
    assert thread.place(queued[1]) is None
    gate.set()
    queued[2].result(timeout=5)
    assert thread.place(queued[2]) is None  # done
    thread.close(5)
    # Measured runs replace the guess: three runs of about 0.2 s, so a job behind two of them waits about 0.4 s.
    thread = ModelThread(max_waiting=10)
    for _ in range(3):
        thread.submit(lambda: time.sleep(0.2)).result(timeout=5)
    assert thread.run_s(128) == pytest.approx(0.2, abs=0.1)  # three default-sized runs of 0.2 s
    gate = threading.Event()
    thread.submit(gate.wait)
    time.sleep(0.05)
    thread.submit(lambda: None)
    last = thread.submit(lambda: None)
    assert thread.place(last).ahead == 2
    assert thread.place(last).wait_s == pytest.approx(0.35, abs=0.15)
    gate.set()
    thread.close(5)


def test_a_models_load_does_not_count_toward_the_expected_wait():
    thread = ModelThread()
    thread.submit(lambda: time.sleep(0.3), measured=False).result(timeout=5)
    thread.submit(lambda: None).result(timeout=5)
    assert thread.run_s(128) < 0.1
    thread.close(5)


def test_the_expected_wait_scales_with_the_work_ahead():
    """A short warm-up must not make a class's long races look short: the line learns
    seconds per unit of work (tokens of all lanes), and a job ahead counts by its size."""
    thread = ModelThread(max_waiting=10)
    thread.submit(lambda: time.sleep(0.1), size=8).result(timeout=5)  # 8 units in 0.1 s
    gate = threading.Event()
    thread.submit(gate.wait, size=8)
    time.sleep(0.05)
    big = thread.submit(lambda: None, size=80)
    small = thread.submit(lambda: None, size=8)
    last = thread.submit(lambda: None, size=8)
    # Behind 80 + 8 units (and what is left of the running one's 8): about 1.1 s, and 80 units
    # ahead count ten times as much as 8.
    assert thread.place(last).wait_s == pytest.approx(1.1 + 0.05, abs=0.15)
    assert thread.place(small).wait_s - thread.place(big).wait_s == pytest.approx(1.0, abs=0.1)
    gate.set()
    thread.close(5)


def test_the_waiting_words_give_the_place_and_the_wait():
    assert "3 runs are ahead of yours" in waiting_text(Place(3, 75.0)) and "about 75 s" in waiting_text(Place(3, 75))
    assert "1 run is ahead" in waiting_text(Place(1, 200.0)) and "about 3 min" in waiting_text(Place(1, 200.0))
    assert "one generation runs at a time" in waiting_text(None)


# ----------------------------------------------------------------------------- recordings


def test_the_pages_starting_race_is_the_apis_starting_race():
    """A recording is looked up by the request's every field: the page's starting
    controls and an API call giving only the prompt must be the same request, or the
    page's first click would always run live."""
    prompt = "Explain in three sentences why bread rises in the oven."
    page = {"prompt": prompt, "max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "seed": 0,
            "tree_depth": DEVICE_TREE.depth, "tree_top_k": DEVICE_TREE.serial_top_k,
            "tree_nodes": DEVICE_TREE.total_tokens, "tree_cost_aware": DEVICE_TREE.cost_aware,
            "tree_shape": SIZED_SHAPE, "drafter": "gumiho", "target": "", "drafter_path": "",
            "copy_from_context": COPY_DEFAULT, "target_weights": "float32", "tree_touched": False}
    given = as_given(page)
    from_page = parse_request(RaceForm(**{f.name: given[f.name] for f in dataclasses.fields(RaceForm)}))
    recorded = next(req for kind, req, _ in example_requests(prompt, None, ("race",)))
    assert request_key("race", from_page) == request_key("race", recorded)
    moved = parse_request(RaceForm(prompt, 65))
    assert request_key("race", moved) != request_key("race", recorded)


def test_a_recording_made_with_another_setup_is_refused_with_one_line(tmp_path, caplog):
    path = str(tmp_path / "rec.pkl.gz")
    req = parse_request(RaceForm("Hello"))
    rec = Recordings({"target": "a", "drafters": {"gumiho": "1"}}, "Some CPU, 2 cores on 2026-12-07")
    rec.add("race", req, {"answer": 42})
    rec.save(path)
    same = Recordings.load(path, {"target": "a", "drafters": {"gumiho": "1"}})
    assert same.get("race", req) == {"answer": 42} and same.recorded_on.startswith("Some CPU")
    with caplog.at_level(logging.WARNING, logger="gumiho.app"):
        other = Recordings.load(path, {"target": "a", "drafters": {"gumiho": "2"}})
    assert other.get("race", req) is None and len(other) == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "drafters" in lines[0] and "run live" in lines[0]
    (tmp_path / "bad.pkl.gz").write_bytes(b"not a recording")
    assert len(Recordings.load(str(tmp_path / "bad.pkl.gz"), {})) == 0


def test_shared_runs_are_kept_bounded_and_by_id_only(tmp_path):
    runs = SharedRuns(limit=2)
    ids = [f"{i:032x}" for i in range(3)]
    for i in ids:
        runs.put(i, "race", i)
    assert runs.get(ids[0], "race") is None and runs.get(ids[2], "race") == ids[2]
    assert runs.get(ids[2], "walkthrough") is None
    for bad in ("../../etc/passwd", "", None, "x" * 32, ids[2] + "0"):
        assert runs.get(bad, "race") is None
    with pytest.raises(ValueError):
        runs.put("../x", "race", 1)
    kept = SharedRuns(limit=1, folder=str(tmp_path))
    kept.put(ids[0], "race", {"n": 0})
    kept.put(ids[1], "race", {"n": 1})  # pushes the first out of memory, not off the disk
    assert kept.get(ids[0], "race") == {"n": 0}
    assert SharedRuns(folder=str(tmp_path)).get(ids[1], "race") == {"n": 1}  # a restarted server


# ----------------------------------------------------------------------------- the API, end to end


@pytest.fixture(scope="module")
def hub():
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=1024, seed=3)
    target.tokenizer = TOK
    drafter = _random_drafter(target, "gumiho")
    hub = ModelHub(default_loader=lambda: target, warmup=False, max_waiting=4)
    hub.resolve = lambda *a, **k: Resolved(target, drafter, False, "", "random drafter")
    hub.default = target
    hub.state = "ready"
    hub._ready.set()
    yield hub
    hub.close(30)


def test_a_recorded_example_is_answered_at_once_and_says_so(hub, tmp_path):
    form = RaceForm("Hello there", 12, 0.0, 1.0, 0, 3, 2, 4)
    live = asyncio.run(layout.api_race(hub, form, Replays(hub), live=False))
    assert live["ok"] and live["source"] == LIVE and "recorded_on" not in live and len(live["run_id"]) == 32
    # Record that race for this setup, as the recording command does.
    from app.race.run import compute_race
    req = parse_request(form)
    rec = Recordings(setup_of(hub), "Test CPU, 2 cores on 2026-12-07")
    rec.add("race", req, compute_race(hub, req, threading.Event()))
    path = str(tmp_path / "examples.pkl.gz")
    rec.save(path)
    replays = Replays(hub, path)
    # The model thread is held: a recorded answer must not wait behind it.
    gate = threading.Event()
    hub.submit(gate.wait)
    try:
        t0 = time.perf_counter()
        out = asyncio.run(asyncio.wait_for(layout.api_race(hub, form, replays), 10))
        assert time.perf_counter() - t0 < 2
    finally:
        gate.set()
    assert out["ok"] and out["source"] == RECORDED and out["recorded_on"] == "Test CPU, 2 cores on 2026-12-07"
    assert out["vanilla"]["tokens"] == live["vanilla"]["tokens"] == out["gumiho"]["tokens"]
    again = asyncio.run(layout.api_race(hub, form, replays, live=True))
    assert again["source"] == LIVE
    assert set(again["queue"]) == {"ahead_at_arrival", "expected_wait_s", "answered_after_s"}
    assert again["queue"]["answered_after_s"] >= 0
    shared = replays.shared.get(again["run_id"], "race")
    assert shared is not None and [t for e in shared.gumiho.events for t in e.tokens] == again["gumiho"]["tokens"]
    # The page says a replay is one, and a live race gives its link.
    assert "Recorded on Test CPU" in render_result(dataclasses.replace(shared, recorded_on="Test CPU, 2 cores"))
    assert f'href="?run={again["run_id"]}"' in render_result(shared)


def test_a_page_waiting_for_the_model_is_shown_its_place(hub):
    """The race's status while its run waits in line names the place and the wait."""
    from app.core.jobs import RUNS
    from app.race.tab import race_compute

    req = parse_request(RaceForm("Hello there", 4, 0.0, 1.0, 0, 3, 2, 4))
    gate = threading.Event()
    hub.submit(gate.wait)

    async def first_statuses():
        seen = []
        run_id = RUNS.new()
        steps = race_compute(hub, Replays(hub), True, {"request": req, "run_id": run_id})
        async for out in steps:
            seen.append(out.get("status", ""))
            if len(seen) == 2:
                gate.set()
        RUNS.end(run_id)
        return seen

    try:
        seen = asyncio.run(asyncio.wait_for(first_statuses(), 60))
    finally:
        gate.set()
    assert "1 run is ahead of yours" in seen[0] and "expected wait about" in seen[0]


def test_a_recording_that_names_code_outside_a_result_is_refused(tmp_path):
    """Only the app's own files are unpickled, and even those may name only the classes
    a result holds: a file that would call anything else loads as no recording."""
    import gzip
    import os
    import pickle

    class Calls:
        def __reduce__(self):
            return (os.getcwd, ())

    path = tmp_path / "evil.pkl.gz"
    with gzip.open(path, "wb") as f:
        pickle.dump({"setup": {}, "recorded_on": "x", "runs": {"race:{}": Calls()}}, f)
    assert len(Recordings.load(str(path), {})) == 0


def _drain(gen) -> list:
    async def go():
        return [out async for out in gen]
    return asyncio.run(asyncio.wait_for(go(), 60))


def test_every_tab_replays_a_recorded_example_at_once_and_offers_it_live(hub, tmp_path):
    """The walkthrough, the comparison and the losslessness check of an example, as the
    recording command makes them, are shown at once (the model thread held all along),
    said to be recorded, with Run it live shown."""
    from app.compare.tab import compare_compute
    from app.core.jobs import RUNS
    from app.lossless.tab import lossless_compute
    from app.walkthrough.tab import walk_run

    prompt = "Hello there"
    rec = Recordings(setup_of(hub), "Test CPU, 2 cores on 2026-12-07")
    made = {}
    for kind, req, compute in example_requests(prompt, None):
        if kind == "lossless":
            req = dataclasses.replace(req, samples=20)
        if kind == "race" or (kind == "walkthrough" and req.settings.temperature > 0):
            continue
        rec.add(kind, req, hub.submit(lambda: compute(hub, req, threading.Event())).result(timeout=120))
        made[kind] = req
    path = str(tmp_path / "examples.pkl.gz")
    rec.save(path)
    replays = Replays(hub, path)
    gate = threading.Event()
    hub.submit(gate.wait)
    try:
        outs = {"compare": _drain(compare_compute(hub, replays, False, {"request": made["compare"],
                                                                        "run_id": RUNS.new()})),
                "lossless": _drain(lossless_compute(hub, replays, False, {"request": made["lossless"],
                                                                          "run_id": RUNS.new()}))}
        walk_values = {"prompt": prompt, "max_new_tokens": 24, "walk_tree": "paper", "temperature": 0.0, "seed": 0,
                       "drafter": "gumiho", "tree_depth": None, "tree_top_k": None, "tree_nodes": None,
                       "target": "", "drafter_path": "", "tree_cost_aware": None, "copy_from_context": None,
                       "tree_shape": SIZED_SHAPE, "tree_touched": False}
        outs["walkthrough"] = _drain(walk_run(hub, replays, False, walk_values))
    finally:
        gate.set()
    for kind, out in outs.items():
        assert len(out) == 1, kind  # one answer, no waiting
        assert "Recorded on Test CPU" in out[0]["status"], kind
        assert out[0]["live_btn"].constructor_args.get("visible") is True, kind
