"""The page's events sent by hand over HTTP, to the server as it serves (issue 54,
item 1): with nulls, with values of the wrong kind, with too few or too many, out
of order, and with the page's own values. Each is refused in a few words or
answered as the page would be, no traceback reaches the log, and no run starts
that the model thread's bound does not hold."""
from __future__ import annotations

import json
import urllib.request

from test_app_probe import no_framework_words, post, probe_server, while_busy  # noqa: F401  (the server fixture)

from app.web.checks.requests import API_NAMES


def page_events(demo) -> dict:
    """The page's events the server runs (not the documented API, nor an event that
    runs in the browser alone)."""
    return {i: fn for i, fn in demo.fns.items() if fn.api_name not in API_NAMES and fn.fn is not None}


def send(base: str, fn_index: int, data, session: str, queued: bool) -> tuple[int, dict]:
    route = "queue/join" if queued else "run/predict"
    status, text = post(f"{base}/gradio_api/{route}",
                        json.dumps({"fn_index": fn_index, "data": data, "session_hash": session}).encode())
    return status, json.loads(text)


def refused(status: int, answer: dict) -> bool:
    if status not in (409, 422):
        return False
    assert answer["ok"] is False and 0 < len(answer["message"]) < 160, answer
    no_framework_words(answer["message"])
    return True


def has_values(fn) -> bool:
    return any(type(c).__name__ != "State" for c in fn.inputs)


# Values no control of each kind holds (a Number or a text box may be empty: null is the page's there).
WRONG = {"Checkbox": (None, "yes", 1, {}), "Textbox": (5, [], {"a": 1}),
         "Slider": (None, "3", True, 10 ** 9, -(10 ** 9), []), "Number": ("3", True, [], {}),
         # What if?'s figures take a number beyond the track's range on purpose (used as typed, and
         # said so: app.views.sliders), so only what is no number at all is wrong there.
         "FigureSlider": (None, "3", True, []),
         "Radio": (None, "no such choice", 3, []), "Dropdown": (None, "no such choice", 3, []),
         "Dataset": (None, "x", 1.5, True)}


def test_every_page_event_with_nulls_or_wrong_values_is_refused_in_words(probe_server, capfd):  # noqa: F811
    base, _, demo = probe_server
    checked = 0
    for i, fn in page_events(demo).items():
        n = len(fn.inputs)
        bodies = [[None] * n, [None] * (n + 1), ["x"] * (n + 2)]
        if n:
            bodies.append([None] * (n - 1))
        if has_values(fn):
            page = [getattr(c, "value", None) for c in fn.inputs]
            for k, c in enumerate(fn.inputs):
                if type(c).__name__ != "State":
                    bodies += [page[:k] + [w] + page[k + 1:] for w in WRONG[type(c).__name__]]
        for data in bodies:
            status, answer = send(base, i, data, f"hand-{i}", fn.queue is not False)
            if data is bodies[0] and not has_values(fn) and fn.trigger_after is None:
                # Nulls are what the page itself sends for the values its server keeps.
                assert status == 200, (fn.name, status, answer)
                continue
            assert refused(status, answer), (fn.name, data, status, answer)
            checked += 1
    assert checked > 100
    # An event that runs in the browser alone (the tabs' resize) is no event of the server's.
    for i in (i for i, fn in demo.fns.items() if fn.fn is None):
        status, answer = send(base, i, [], f"hand-{i}", False)
        assert status == 404 and answer["message"] == "No such event on this page.", (status, answer)
    log = capfd.readouterr()
    assert "Traceback" not in log.err + log.out and "ComponentProcessingError" not in log.err + log.out


def test_a_start_race_with_nulls_gets_words_not_an_empty_error(probe_server):  # noqa: F811
    """The probe's own call: fn 1 with 16 nulls was answered ``{"error": null}`` after a traceback."""
    base, _, demo = probe_server
    start = next(i for i, fn in demo.fns.items() if fn.name == "start_race")
    status, answer = send(base, start, [None] * len(demo.fns[start].inputs), "x", True)
    assert status == 422 and "This event is the page's own: its value" in answer["message"], answer
    assert "must be a number" in answer["message"] or "must be true or false" in answer["message"], answer


def test_a_chained_event_sent_before_its_first_is_refused(probe_server):  # noqa: F811
    base, _, demo = probe_server
    chained = {i: fn for i, fn in page_events(demo).items() if fn.trigger_after is not None}
    assert {fn.name for fn in chained.values()} >= {"race_compute", "race_replay", "end_race", "start_race"}
    for i, fn in chained.items():
        page = [getattr(c, "value", None) for c in fn.inputs]  # the page's own values
        status, answer = send(base, i, page, "never-started", fn.queue is not False)
        assert status == 409 and "out of order" in answer["message"], (fn.name, answer)


def join_and_wait(base: str, fn_index: int, data, session: str, timeout: float = 60.0) -> list:
    """Join the queue with one event and read the session's stream until it completes: its outputs."""
    status, answer = send(base, fn_index, data, session, True)
    assert status == 200, answer
    outputs = []
    url = f"{base}/gradio_api/queue/data?session_hash={session}"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("msg") in ("process_generating", "process_completed") and msg.get("output"):
                outputs.append(msg["output"])
            if msg.get("msg") == "process_completed":
                return outputs
    return outputs


def test_runs_started_by_hand_with_the_pages_values_wait_within_the_bound(probe_server):  # noqa: F811
    """start_race then race_compute, as the page chains them, from four hand-made
    sessions while the model is busy: two wait (the bound), two are told the server is busy."""
    base, hub, demo = probe_server
    start = next(i for i, fn in demo.fns.items() if fn.name == "start_race")
    compute = next(i for i, fn in demo.fns.items() if fn.name == "race_compute" and fn.trigger_after == start)
    inputs = demo.fns[start].inputs
    values = [c.value for c in inputs]
    values[next(i for i, c in enumerate(inputs) if c.elem_id == "gm-prompt")] = "Hello"
    values[next(i for i, c in enumerate(inputs) if getattr(c, "label", "") == "Max new tokens")] = 2
    sessions = [f"bounded-{k}" for k in range(4)]
    for s in sessions:
        out = join_and_wait(base, start, values, s)
        assert out and out[-1].get("data"), out
    busy, answers = while_busy(hub, [lambda s=s: json.dumps(join_and_wait(base, compute, [None, None], s, 120))
                                     for s in sessions], timeout=60)
    assert len(busy) == 2, "two runs wait for the model; the others are refused at once"
    for answer in busy:
        assert "The server is busy: 2 requests are already waiting" in answer
    assert sum("The server is busy" not in a for a in answers) == 2
    # Each start lets its session send race_compute once: a second is out of order.
    status, answer = send(base, compute, [None, None], sessions[0], True)
    assert status == 409, answer
