"""The app against careless and hostile requests, without a browser or the real
model: a cancelled request stops its generation and frees the model at once, a
flood of work is refused with a message, Stop keeps what was produced, every
input is checked where it enters, errors reach the page escaped, and a public
deployment loads only what its operator allows."""
from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time

import pytest
from test_app_render import TOK

from app.core.access import Access
from app.core.forms import RaceForm, parse_request
from app.core.worker import BUSY, ModelThread
from app.models.hub import ModelHub, Resolved, _random_drafter
from app.race.replay import replay_frames
from app.race.run import compute_race
from app.views.records import DrafterLayout
from app.views.render import render_result, render_run, render_stats
from app.walkthrough.treeplot import tree_figure
from app.web import layout
from app.web.api import error_summary
from gumiho import GenerationSettings, GumihoError, TreeSettings, stream
from helpers import tiny_target


def request(prompt="Hello there", max_new=8, target="", drafter_path="", access=None, **kw):
    return parse_request(RaceForm(prompt, max_new, kw.get("temperature", 0.0), 1.0, kw.get("seed", 0), 3, 2, 4, kw.get("kind", "gumiho"), target, drafter_path), access=access)


@pytest.fixture(scope="module")
def slow_hub():
    """A hub serving a tiny target whose every forward takes 20 ms: 512 tokens take
    about ten seconds, long enough to cancel in the middle."""
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=2048, seed=5)
    target.tokenizer = TOK
    drafter = _random_drafter(target, "gumiho")
    forward = target.forward
    target.calls = 0

    def slow_forward(*args, **kwargs):
        target.calls += 1
        time.sleep(0.02)
        return forward(*args, **kwargs)

    target.forward = slow_forward
    hub = ModelHub(default_loader=lambda: target, warmup=False, access=Access(), max_waiting=2)
    hub.resolve = lambda *a, **k: Resolved(target, drafter, False, "", "random drafter")
    hub.state = "ready"
    hub._ready.set()
    yield hub, target
    hub.close()


def api(hub, prompt, max_new_tokens=512, **kw):
    args = dict(temperature=0.0, top_p=1.0, seed=0, tree_depth=3, tree_top_k=2, tree_nodes=4, drafter="gumiho",
                target="", drafter_path="", tree_cost_aware=False)
    args.update(kw)
    return layout.api_race(hub, RaceForm(prompt, max_new_tokens, **args))


# ----------------------------------------------------------------------------- cancellation and the queue


def test_cancelled_api_request_frees_the_model_within_a_second(slow_hub):
    hub, target = slow_hub

    async def scenario():
        task = asyncio.create_task(api(hub, "Hello there"))
        await asyncio.sleep(0.6)
        assert not task.done() and target.calls > 3  # generating
        task.cancel()  # what the web server does when the client cancels
        with pytest.raises(asyncio.CancelledError):
            await task
        t0 = time.perf_counter()
        await asyncio.wrap_future(hub.submit(lambda: None))  # the next job gets the model
        return time.perf_counter() - t0

    freed = asyncio.run(scenario())
    assert freed < 1.0, f"the model thread was busy {freed:.1f} s after the cancel"
    calls = target.calls
    time.sleep(0.3)
    assert target.calls == calls  # nothing is generating any more
    ok = asyncio.run(api(hub, "Hi", max_new_tokens=4))
    assert ok["ok"] and ok["vanilla"]["new_tokens"] == 4


def test_cancel_before_the_model_starts_drops_the_job(slow_hub):
    hub, target = slow_hub
    gate = threading.Event()
    hub.submit(gate.wait)  # the model is busy
    while hub._worker.waiting():
        time.sleep(0.01)

    async def scenario():
        task = asyncio.create_task(api(hub, "Hello there"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert hub._worker.waiting() == 0  # cancelled while waiting: gone from the queue
    calls = target.calls
    gate.set()
    hub.submit(lambda: None).result(5)
    assert target.calls == calls


def test_queue_flood_is_refused_with_a_message(slow_hub):
    hub, _ = slow_hub
    gate = threading.Event()
    hub.submit(gate.wait)
    while hub._worker.waiting():  # until the model thread runs it
        time.sleep(0.01)
    waiting = [hub.submit(lambda: None) for _ in range(2)]  # the most this hub lets wait
    try:
        r = asyncio.run(api(hub, "Hello there", max_new_tokens=4))
        assert not r["ok"]
        assert r["message"] == BUSY.format(n=2)
        assert "server is busy: 2 requests are already waiting" in r["message"] and "Try again" in r["message"]
    finally:
        gate.set()
    for f in waiting:
        f.result(5)
    assert asyncio.run(api(hub, "Hello there", max_new_tokens=2))["ok"]


def test_model_thread_bound_counts_only_live_jobs():
    thread = ModelThread(max_waiting=1)
    gate = threading.Event()
    running = thread.submit(gate.wait)
    while thread.waiting():  # until it is picked up: a running job does not wait
        time.sleep(0.01)
    first = thread.submit(lambda: 1)
    with pytest.raises(GumihoError, match="server is busy: 1 requests are already waiting"):
        thread.submit(lambda: 2)
    assert first.cancel()  # a cancelled job holds no place
    second = thread.submit(lambda: 3)
    gate.set()
    assert running.result(5) and second.result(5) == 3
    assert thread.close(5)


def test_a_closed_model_thread_ends_after_its_running_job_and_takes_no_more():
    thread = ModelThread()
    gate = threading.Event()
    running = thread.submit(gate.wait)
    while thread.waiting():
        time.sleep(0.01)
    queued = thread.submit(lambda: 1)
    assert not thread.close(0.2)  # the running job is not cut short: the thread waits for it
    assert queued.cancelled() and not running.done()
    with pytest.raises(RuntimeError, match="closed"):
        thread.submit(lambda: 2)
    gate.set()
    assert running.result(5) and thread.close(5) and thread.close()  # and again: nothing more to do


def test_a_hub_dropped_without_close_ends_its_model_thread():
    hub = ModelHub(default_loader=lambda: None, warmup=False)
    hub.submit(hub.status).result(5)  # a finished job that held the hub must not keep it alive
    thread = hub._worker._thread
    del hub
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


# ----------------------------------------------------------------------------- Stop


class StopAfter(threading.Event):
    """A stop flag that turns on at its n-th reading: Stop pressed after n steps."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def is_set(self):
        self.n -= 1
        if self.n <= 0:
            self.set()
        return super().is_set()


@pytest.mark.parametrize("scheme", ["alternating", "sequential"])
def test_stop_keeps_the_produced_tokens(slow_hub, scheme):
    hub, _ = slow_hub
    stop = StopAfter(12)
    result = compute_race(hub, request(max_new=512), stop, scheme=scheme)
    v, g = result.vanilla, result.gumiho
    produced = sum(len(e.tokens) for e in v.events)
    assert v.stopped and g.stopped and 5 <= produced < 512
    if scheme == "sequential":  # stopped while vanilla was timed alone: Gumiho never started
        assert not g.events
    else:  # both were under way, each stops at its next step
        assert 2 <= sum(len(e.tokens) for e in g.events) < 512 and g.events[-1].finish_reason == "stopped"
    frames = list(replay_frames(result, stop, sleep=lambda s: None))
    assert len(frames) == 1 and frames[0].final and not frames[0].stopped
    assert (frames[0].n_vanilla, frames[0].n_gumiho) == (len(v.events), len(g.events))  # everything, at once
    assert render_run(v, frames[0].n_vanilla) == render_run(v) != ""
    assert f'<div class="v">{produced}</div><div class="k">tokens</div>' in render_stats(v, frames[0].n_vanilla)
    if scheme == "sequential":
        assert f"its column shows the {produced} tokens it produced; Gumiho did not run" in render_result(result)
    else:
        assert "Stopped. Both columns and the figures show what was produced until then." in render_result(result)


# ----------------------------------------------------------------------------- inputs where they enter


@pytest.mark.parametrize("kw, match", [
    (dict(prompt=42), "The prompt must be text, got int"),
    (dict(prompt=["hi"]), "The prompt must be text, got list"),
    (dict(prompt="caf\ud800"), r"The prompt holds an invalid character at position 3 \(a lone surrogate, U\+D800"),
    (dict(target=7), r"The target model must be text \(a hub id like 'org/name' or a folder path\), got int"),
    (dict(drafter_path={"a": 1}), "The drafter path must be text .*got dict"),
    (dict(kind=["gumiho"]), "The drafter must be text .*got list"),
    (dict(target="bad\udcff"), "The target model holds an invalid character"),
    (dict(seed=2**70), "Seed must be a whole number from 0 to 2147483647"),
    (dict(seed="abc"), "Seed must be a number"),
    (dict(seed=-5), "Seed must be a whole number from 0"),
])
def test_bad_request_fields(kw, match):
    with pytest.raises(GumihoError, match=match):
        request(**kw)


def test_error_summary_of_an_unsendable_prompt_is_json():
    r = error_summary("The prompt holds an invalid character", "caf\ud800")
    assert r["prompt"] is None and json.dumps(r, ensure_ascii=False).encode("utf-8")
    assert error_summary("x", "fine")["prompt"] == "fine"


def test_registry_names_in_the_target_box():
    paper = request(target="amd/Gumiho-vicuna-7b")
    assert paper.target == "lmsys/vicuna-7b-v1.3" and paper.drafter_path == "amd/Gumiho-vicuna-7b"
    shipped = request(target="smollm2-135m-serial")
    assert shipped.target == "" and shipped.drafter == "serial"


# ----------------------------------------------------------------------------- a public deployment


def test_public_mode_switches():
    assert not Access.from_env({}).public and Access.from_env({}).local_paths
    space = Access.from_env({"SPACE_ID": "someone/gumiho"})
    assert space.public and not space.local_paths and space.allowed == ()
    switched = Access.from_env({"GUMIHO_PUBLIC": "1", "GUMIHO_ALLOWED_MODELS": " Org/Small , /srv/models/mine ",
                                "GUMIHO_ALLOW_LOCAL_PATHS": "yes"})
    assert switched.public and switched.local_paths and switched.allowed == ("Org/Small", "/srv/models/mine")
    assert not Access.from_env({"GUMIHO_PUBLIC": "0"}).public


def test_public_mode_refuses_paths_and_unlisted_ids(monkeypatch):
    public = Access.from_env({"GUMIHO_PUBLIC": "1", "GUMIHO_ALLOWED_MODELS": "Org/Small"})

    # Decided from the text alone: nothing may look at the server's files.
    def no_filesystem(*a, **k):
        raise AssertionError("the filesystem was probed")

    for name in ("exists", "isdir", "isfile"):
        monkeypatch.setattr(os.path, name, no_filesystem)
    for target in ("", "default", "SmolLM2-135M-Instruct", "smollm2-135m-parallel", "amd/Gumiho-llama3-8b",
                   "Gumiho-vicuna-7b", "meta-llama/Meta-Llama-3-8B-Instruct", "org/small"):
        request(target=target, access=public)  # listed: accepted
    for path in ("/etc", "/etc/passwd", "./assets/drafters", "~/models/x", "a/b/c"):
        with pytest.raises(GumihoError, match=r"This public demo does not read folders or files on its server\. "
                                              r"Pick one of the models it lists \(.*amd/Gumiho-vicuna-7b.*Org/Small\)"):
            request(target=path, access=public)
    for hub_id in ("someone/huge-model", "gpt2"):
        with pytest.raises(GumihoError, match=rf"This public demo loads only the models it lists: .*'{hub_id}' is not "
                                              r"one of them; run the app on your own machine \(python app.py\)"):
            request(target=hub_id, access=public)
    for drafter in ("/etc/passwd", "./my-drafter", "someone/drafter"):
        with pytest.raises(GumihoError, match="This public demo does not read drafter folders or files"):
            request(drafter_path=drafter, access=public)
    request(target="amd/Gumiho-vicuna-7b", drafter_path="amd/Gumiho-vicuna-7b", access=public)
    # The operator may open local paths; hub ids stay listed-only.
    local = Access.from_env({"SPACE_ID": "x/y", "GUMIHO_ALLOW_LOCAL_PATHS": "1"})
    request(target="/srv/models/mine", drafter_path="/srv/drafters/mine", access=local)
    with pytest.raises(GumihoError, match="loads only the models it lists"):
        request(target="someone/huge-model", access=local)
    # Run locally, anything goes (the visitor is the operator).
    request(target="someone/huge-model", drafter_path="/srv/d", access=Access.from_env({}))


def test_public_page_says_what_the_box_takes():
    hub = ModelHub(default_loader=lambda: None, access=Access.from_env({"GUMIHO_PUBLIC": "1"}))
    config = str(layout.build_app(hub).config)
    assert "This public demo loads only the models it lists" in config and "amd/Gumiho-vicuna-7b" in config


# ----------------------------------------------------------------------------- what reaches the page


def test_errors_reach_the_toast_and_the_banner_escaped(monkeypatch):
    toasts = []
    monkeypatch.setattr(layout.gr, "Warning", lambda message, *a, **k: toasts.append(message))
    hostile = "<img src=x onerror=alert(1)>"
    banner = layout._fail(GumihoError(f"{hostile!r} is not a valid hub id"))
    assert "<img" not in toasts[0] and "&lt;img src=x onerror=alert(1)&gt;" in toasts[0]
    assert "<img" not in banner and "&lt;img" in banner
    layout._fail(RuntimeError(hostile))  # an unexpected error: its text never reaches the page at all
    assert "img" not in toasts[1] and "Something went wrong (RuntimeError)" in toasts[1]


def test_seed_box_has_no_limit_of_its_own():
    """The framework's own minimum check would end the run's chain of events midway
    and leave the page waiting (tests/app/web/test_app_browser.py has the page's view)."""
    config = layout.build_app(ModelHub(default_loader=lambda: None)).config
    seed = next(c for c in config["components"] if c.get("props", {}).get("label") == "Seed (sampling)")
    assert seed["props"].get("minimum") is None


def test_tree_plot_labels_show_quotes_as_quotes():
    fig = tree_figure(['"', 'say "hi"', "<b>", "a & b"], [-1, 0, 0, 1], [0, 1, 1, 2], [1.0, 0.5, 0.3, 0.2], [1],
                      DrafterLayout(serial_positions=2, max_depth=7), ['"', "'"])
    text = json.dumps(fig)
    assert "&quot;" not in text and "&#34;" in text  # plotly.js decodes numeric entities, not &quot;
    assert "<b>" not in "".join(fig.data[-1]["hovertext"]) and "&lt;b&gt;" in text and "&amp;" in text


def test_a_stream_with_bad_ids_from_the_library_is_refused(slow_hub):
    _, target = slow_hub
    with pytest.raises(GumihoError, match="not a token id"):
        list(stream(target, [5, 400], None, GenerationSettings(max_new_tokens=2, tree=TreeSettings())))
