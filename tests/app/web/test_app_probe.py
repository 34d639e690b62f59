"""The defects a probe of the app found, each reproduced: the server as it serves
(app.web.server.serve, on a free port, a tiny random target behind it) for what only
the web server decides, the hub and the request checks for the rest. Issue 41,
items 1-8 of its probe."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import huggingface_hub
import pytest
from test_app_render import TOK, b

from app.core.access import Access
from app.core.forms import RaceForm, parse_request
from app.core.page import friendly
from app.models.hub import ModelHub, Resolved, _random_drafter
from app.race import tab as race_tab
from app.views.records import record
from app.web.server import serve
from gumiho import EmittedToken, GumihoError, StepEvent
from helpers import tiny_target

PUBLIC = Access.from_env({"GUMIHO_PUBLIC": "1"})
LOCAL = Access.from_env({})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def probe_server():
    """The app served as ``python app.py`` serves it, with a tiny target whose
    forwards take 5 ms, and at most two runs waiting for the model."""
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, ctx=2048, seed=5)
    target.tokenizer = TOK
    drafter = _random_drafter(target, "gumiho")
    hub = ModelHub(default_loader=lambda: target, warmup=False, access=LOCAL, max_waiting=2)
    hub.resolve = lambda *a, **k: Resolved(target, drafter, False, "", "random drafter")
    port = _free_port()
    demo = serve("127.0.0.1", port, hub, block=False)
    hub.wait_ready(60)
    yield f"http://127.0.0.1:{port}", hub, demo
    demo.close()
    hub.close()


def post(url: str, data: bytes, content_type: str = "application/json") -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def call(base: str, name: str, data: list) -> tuple[int, object]:
    """One call of ``/call/<name>``: the status of the POST, then the answer (or the POST's own body)."""
    status, text = post(f"{base}/gradio_api/call/{name}", json.dumps({"data": data}).encode())
    if status != 200:
        return status, json.loads(text)
    event = json.loads(text)["event_id"]
    with urllib.request.urlopen(f"{base}/gradio_api/call/{name}/{event}", timeout=120) as r:
        lines = r.read().decode("utf-8").splitlines()
    kind = next(line for line in lines if line.startswith("event: "))
    payload = lines[lines.index(kind) + 1][len("data: "):]
    return (200 if kind == "event: complete" else 500), json.loads(payload)


def no_framework_words(text: str) -> None:
    for words in ("object at 0x", "Traceback", "IndexError", "didn't receive enough input values", "Error("):
        assert words not in text, text


# ----------------------------------------------------------------------------- 1. uploads


def test_the_upload_route_takes_no_file(probe_server, tmp_path):
    """Gradio's upload route stored files of any size and said where; the app has no
    file inputs, so it takes none."""
    base, _, _ = probe_server
    boundary = "gumihoprobe"
    blob = os.urandom(512 << 10)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + blob + f"\r\n--{boundary}--\r\n".encode()
    status, text = post(f"{base}/gradio_api/upload", body, f"multipart/form-data; boundary={boundary}")
    assert status == 403, (status, text[:200])
    assert json.loads(text) == {"ok": False, "message": "This app takes no file uploads.",
                                "detail": "This app takes no file uploads."}
    assert "big.bin" not in text and "/tmp" not in text


# ----------------------------------------------------------------------------- 4. only the documented API


def test_only_the_documented_api_is_callable_by_name(probe_server):
    base, _, _ = probe_server
    for name, data in (("load_example", [999]), ("load_example", ["x"]), ("walk_play", []), ("walk_tick", []),
                       ("lambda", []), ("stop_race", [""]), ("start_race", [])):
        status, answer = call(base, name, data)
        assert status == 404 and answer["ok"] is False and "the endpoints are /race and /walkthrough" in answer["message"], name
        no_framework_words(json.dumps(answer))


def test_a_short_or_long_race_call_answers_ok_false_or_with_defaults(probe_server):
    """/race with some of its 15 values: the rest take their documented defaults (as
    Gradio's client fills them), so a call without a prompt is answered ok: false by
    the app's own check, not by the framework's count of values."""
    base, _, _ = probe_server
    status, answer = call(base, "race", [])
    assert status == 200 and answer[0]["ok"] is False and "prompt is empty" in answer[0]["message"]
    status, answer = call(base, "race", ["Hello", 3, 0.0])
    assert status == 200 and answer[0]["ok"] and answer[0]["vanilla"]["new_tokens"] == 3
    status, answer = call(base, "race", ["Hello"] + [0] * 20)
    assert status == 422 and answer["ok"] is False and "at most 15 values" in answer["message"]
    no_framework_words(json.dumps(answer))


def test_a_walkthrough_call_answers_its_steps_or_ok_false(probe_server):
    """/walkthrough, the second documented endpoint: its defaults complete a short
    call, a bad value is answered in words, and a good one gives every verify step's
    tree with who proposed each node and the accepted path."""
    base, _, _ = probe_server
    status, answer = call(base, "walkthrough", [])
    assert status == 200 and answer[0]["ok"] is False and "prompt is empty" in answer[0]["message"]
    status, answer = call(base, "walkthrough", ["Hello", 6, "a tree of my own"])
    assert status == 200 and answer[0]["ok"] is False and "Unknown tree" in answer[0]["message"]
    status, answer = call(base, "walkthrough", ["Hello", 6, "race"])
    walk = answer[0]
    assert status == 200 and walk["ok"] and walk["new_tokens"] == 6 and walk["verify_steps"] == len(walk["steps"]) > 0
    for step in walk["steps"]:
        nodes = step["nodes"]
        assert nodes[0]["parent"] == -1 and nodes[0]["head"] == "root"
        assert all(0 <= n["parent"] < i for i, n in enumerate(nodes) if i), nodes  # parents come first
        assert len(step["accepted_nodes"]) == step["accepted_length"]
        assert len(step["target_choices"]) == step["accepted_length"] + 1  # the last is the bonus token
    status, answer = call(base, "walkthrough", ["Hello"] + [0] * 7)
    assert status == 422 and "at most 7 values" in answer["message"]
    no_framework_words(json.dumps(answer))


def test_a_page_event_sent_by_hand_with_other_values_is_refused(probe_server):
    base, _, demo = probe_server
    walk_play = next(i for i, fn in demo.fns.items() if fn.name == "walk_play")
    for route in ("queue/join", "run/predict"):  # the page's queued and unqueued events
        for body in ({"fn_index": walk_play, "data": [], "session_hash": "probe"},
                     {"fn_index": 10_000, "data": [], "session_hash": "probe"}, [1, 2]):
            status, text = post(f"{base}/gradio_api/{route}", json.dumps(body).encode())
            assert status in (400, 404, 422) and json.loads(text)["ok"] is False, (route, body, status, text)
            no_framework_words(text)
    # The page's own requests still pass: its status poll, unqueued, with its values.
    poll = next(i for i, fn in demo.fns.items() if fn.name == "poll")
    status, text = post(f"{base}/gradio_api/run/predict",
                        json.dumps({"fn_index": poll, "data": [], "session_hash": "probe"}).encode())
    assert status == 200 and "Ready" in text, text[:300]


def test_the_page_events_are_not_in_the_api_description(probe_server):
    base, _, _ = probe_server
    with urllib.request.urlopen(f"{base}/gradio_api/info?all_endpoints=true", timeout=30) as r:
        info = json.loads(r.read())
    assert list(info["named_endpoints"]) == ["/race", "/walkthrough", "/compare", "/lossless_check"], \
        list(info["named_endpoints"])


# ----------------------------------------------------------------------------- 5. the busy refusal


def while_busy(hub, calls, waiting: int = 2, timeout: float = 30.0) -> tuple[list, list]:
    """Make the model busy, start every call of ``calls`` (thunks), and wait for the
    ``waiting`` first to answer (those refused at once); then free the model. Returns
    (the answers that came at once, every answer)."""
    gate = threading.Event()
    hub.submit(gate.wait)  # the model is busy
    while hub._worker.waiting():
        time.sleep(0.01)
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = [pool.submit(c) for c in calls]
            deadline = time.time() + timeout
            while sum(f.done() for f in futures) < waiting and time.time() < deadline:
                time.sleep(0.05)
            at_once = [f.result() for f in futures if f.done()]
            gate.set()
            return at_once, [f.result() for f in futures]
    finally:
        gate.set()


def test_runs_beyond_the_bound_are_refused_with_the_documented_words(probe_server):
    """Gradio's queue used to hold every run (its own limit of one at a time), so the
    app's "The server is busy" never appeared; now the model thread is the queue."""
    base, hub, _ = probe_server
    at_once, answers = while_busy(hub, [lambda i=i: call(base, "race", [f"Hello {i}", 2]) for i in range(4)])
    refused = [a[1][0] for a in at_once]
    answers = [a[1][0] for a in answers]
    assert len(refused) == 2, "two runs wait for the model; the others are refused at once"
    for r in refused:
        assert r["ok"] is False and r["message"].startswith("The server is busy: 2 requests are already waiting")
    assert sum(a["ok"] for a in answers) == 2


# ----------------------------------------------------------------------------- 8. Stop with no run


def test_stop_with_no_run_in_flight_says_nothing():
    from app.core.page import by_name

    run_id, status = gr.State(""), gr.HTML("")
    stop = by_name(race_tab.stop_race, {"run_id": run_id}, {"status": status})  # as the page wires it
    assert stop({run_id: ""}) is not None and not isinstance(stop({run_id: ""}), str)
    assert isinstance(stop({run_id: "no-such-run"}), type(gr.skip()))
    rid = race_tab.RUNS.new()
    try:
        assert "Stopping both columns" in stop({run_id: rid})
    finally:
        race_tab.RUNS.end(rid)


# ----------------------------------------------------------------------------- 2, 3. public mode's words


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def public_hub(access=PUBLIC):
    target = tiny_target("llama", vocab=320, hidden=32, eos=319, seed=5)
    hub = ModelHub(default_loader=lambda: target, warmup=False, access=access)
    hub.default, hub.state = target, "ready"
    hub._ready.set()
    return hub


def test_public_mode_never_advises_a_folder_it_refuses(offline):
    hub = public_hub()
    with pytest.raises(GumihoError) as target_error:
        hub.resolve("lmsys/vicuna-7b-v1.3", "gumiho", "amd/Gumiho-vicuna-7b")
    with pytest.raises(GumihoError) as drafter_error:
        hub.resolve("", "gumiho", "amd/Gumiho-vicuna-7b")
    for e in (target_error.value, drafter_error.value):
        message = friendly(e)
        assert "is not downloaded and this app runs offline" in message, message
        assert "folder" not in message.replace("drafter folders", "") and "local cache" not in message, message
    assert "Leave the drafter box empty" in str(drafter_error.value)
    # Run locally, a folder is the advice.
    with pytest.raises(GumihoError, match="Give a drafter folder instead"):
        public_hub(LOCAL).resolve("", "gumiho", "amd/Gumiho-vicuna-7b")


def test_a_drafter_for_another_target_is_refused_from_the_names(monkeypatch):
    def nothing_may_be_looked_at(*a, **k):
        raise AssertionError("the filesystem or the hub was asked")

    for name in ("exists", "isdir", "isfile"):
        monkeypatch.setattr(os.path, name, nothing_may_be_looked_at)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", nothing_may_be_looked_at)
    cases = [("", "amd/Gumiho-llama3-70b"), ("lmsys/vicuna-7b-v1.3", "amd/Gumiho-llama3-70b"),
             ("amd/Gumiho-vicuna-7b", "Gumiho-llama2-7b")]
    for access in (PUBLIC, LOCAL):
        for target, drafter in cases:
            with pytest.raises(GumihoError, match=r"is the paper's drafter for .*, not for "):
                parse_request(RaceForm("hi", 4, 0.0, 1.0, 0, 3, 2, 4, "gumiho", target, drafter), access=access)
        matched = parse_request(RaceForm("hi", 4, 0.0, 1.0, 0, 3, 2, 4, "gumiho", "lmsys/vicuna-7b-v1.3", "amd/Gumiho-vicuna-7b"), access=access)
        assert matched.drafter_path == "amd/Gumiho-vicuna-7b"


# ----------------------------------------------------------------------------- 6. local mode's words


def test_a_drafter_path_is_named_as_typed_never_with_the_servers_home():
    hub = public_hub(LOCAL)
    with pytest.raises(GumihoError) as e:
        hub.resolve("", "gumiho", "~/.ssh")
    message = friendly(e.value)
    assert "'~/.ssh'" in message and os.path.expanduser("~") + "/" not in message, message


def test_a_malformed_drafter_folder_gets_the_apps_words(tmp_path, monkeypatch):
    from app.models import loadable

    def python_error(*a, **k):
        raise TypeError("DrafterConfig.__init__() missing 1 required positional argument: 'vocab_size'")

    monkeypatch.setattr(loadable, "load_drafter", python_error)
    folder = tmp_path / "half-a-drafter"
    folder.mkdir()
    with pytest.raises(GumihoError) as e:
        public_hub(LOCAL).resolve("", "gumiho", str(folder))
    message = friendly(e.value)
    assert "could not be read: its config.json or weights are not a drafter's" in message
    assert "__init__" not in message and "positional argument" not in message


def test_messages_never_show_the_servers_places():
    home = os.path.expanduser("~")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    message = friendly(GumihoError(f"No drafter at '{home}/.ssh' nor {root}/assets/drafters/x; {home}"))
    assert home + "/" not in message and root not in message
    assert "'~/.ssh'" in message and "./assets/drafters/x" in message


# ----------------------------------------------------------------------------- 7. a cut character


def test_an_answer_cut_inside_a_character_ends_on_a_whole_one():
    shalom = b("שלום")
    tokens = shalom + b(" \u0645")[:2]  # the answer stops after the first byte of a two-byte letter
    events = [StepEvent(step=i, emitted=[EmittedToken(t, 0, "target", None)], accepted_length=0, rejected=[],
                        drafted=0, draft_s=0.0, verify_s=0.0, elapsed_s=0.01 * (i + 1),
                        finished=i == len(tokens) - 1, finish_reason="length" if i == len(tokens) - 1 else None)
              for i, t in enumerate(tokens)]
    run = record("vanilla", events, TOK, b("say hi"))
    assert run.text == "שלום " and not run.text.endswith("\ufffd")
    # An answer that ended by itself keeps what it wrote.
    events[-1].finish_reason = "eos"
    assert record("vanilla", events, TOK, b("say hi")).text.endswith("\ufffd")


ODD_REQUESTS = [  # (method, route under /gradio_api, body): odd, missing or foreign values
    ("GET", "/queue/data?session_hash=nosuch", None), ("GET", "/queue/data", None),
    ("GET", "/queue/data?session_hash=", None), ("GET", "/heartbeat/nosuch", None),
    ("GET", "/upload_progress?upload_id=nosuch", None), ("GET", "/info?all_endpoints=maybe", None),
    ("GET", "/file=/etc/passwd", None), ("GET", "/call/race/nosuch", None), ("GET", "/call/nosuch/nosuch", None),
    ("POST", "/queue/join", b'{"fn_index": "x", "data": 5}'), ("POST", "/queue/join", b"[1, 2]"),
    ("POST", "/cancel", b'{"session_hash": 5, "event_id": null}'), ("POST", "/cancel", b"not json"),
    ("POST", "/call/race", b'{"data": "x"}'), ("POST", "/run/predict", b'{"fn_index": 999}'),
    ("POST", "/upload", b"x" * 100),
]


def test_odd_requests_to_every_route_leave_no_traceback_in_the_log(probe_server, capfd):
    """Issue 60: a client's odd request writes at most a line to the log. An unknown
    session's results stream (queue/data) used to write an ~80-line traceback."""
    base, _, _ = probe_server
    capfd.readouterr()
    for method, route, body in ODD_REQUESTS:
        req = urllib.request.Request(f"{base}/gradio_api{route}", data=body, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status = r.status
                if "/heartbeat/" not in route:  # a heartbeat streams for as long as it is read
                    r.read(1 << 16)
        except urllib.error.HTTPError as e:
            status = e.code
        assert status != 500, (method, route)
    time.sleep(0.5)
    out, err = capfd.readouterr()
    log = out + err
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
