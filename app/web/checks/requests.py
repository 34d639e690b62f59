"""What the web server answers before Gradio sees a request.

The page talks to the server through Gradio's routes, and any client can send
those routes what it likes. Three rules keep a client to what the app offers:

* **No uploads.** The app has no file inputs, but Gradio's upload route would
  store files of any size in its cache (and serve them back): it is refused.
* **Only the documented API by name.** ``/call/<name>``, ``/run/<name>`` and
  ``/api/<name>`` take only the names of :data:`API_NAMES`. A call that leaves out trailing
  values gets their documented defaults (as Gradio's own client fills them), so a
  short call reaches the app's checks and is answered ``ok: false`` with a message
  instead of the framework's own error text.
* **Streams only for sessions that have something to stream.** The page reads its
  events' results from ``/queue/data?session_hash=...``, a client of the API from
  ``/call/<name>/<event id>``; Gradio answers a hash or an id it does not know by
  raising inside a response it has already started, which writes an ~80-line
  traceback to the log for every such request. One with nothing pending is
  answered 404 here, in one line.
* **The page's events as the page sends them.** A request of the page's own routes
  (:data:`PAGE_ROUTES`) must name one of the page's events and carry exactly its
  values, each of the kind and in the range its control holds, and a chained
  event must follow the event it is chained to (app/web/checks/fields.py); anything else is
  refused here, before Gradio's own checks would fail with a traceback in the log.

Refusals are JSON ``{"ok": false, "message": ...}``, never a traceback.
"""
from __future__ import annotations

import json
from typing import Callable, Optional, Sequence

from .fields import Chains, Event, refusal

API_NAMES = ("race", "walkthrough", "compare", "lossless_check")  # the documented endpoints (app/web/api.py)
PREFIX = "/gradio_api"
MAX_BODY = 1 << 20  # bytes: a prompt is at most 40,000 characters (app.core.forms)
NAMED_ROUTES = ("/call/v2/", "/call/", "/run/", "/api/")
# The page's own routes, which name an event by its index: the queue's, and the one
# its unqueued events (polls, toggles, steps of the walkthrough) are sent to.
PAGE_ROUTES = ("/queue/join", "/run/predict", "/api/predict")


class Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _route(path: str) -> str:
    """The path inside Gradio's API prefix, without a trailing slash ("" if outside it)."""
    if not path.startswith(PREFIX + "/"):
        return ""
    return path[len(PREFIX):].rstrip("/")


def named_endpoint(route: str) -> Optional[str]:
    """The endpoint a by-name route calls (``/call/race`` -> "race"), else None."""
    for head in NAMED_ROUTES:
        if route.startswith(head):
            return route[len(head):]
    return None


def complete_api_values(data, defaults: Sequence, name: str = "race") -> list:
    """A documented endpoint's values: those sent, then the defaults of the ones
    left out (None where there is no default: the app's checks name what is missing)."""
    if not isinstance(data, list):
        raise Refusal(422, f"Send the /{name} values as a JSON list under \"data\".")
    if len(data) > len(defaults):
        raise Refusal(422, f"/{name} takes at most {len(defaults)} values; got {len(data)}.")
    return list(data) + list(defaults[len(data):])


class Guard:
    """ASGI middleware applying the module's rules. ``events()`` gives the page's
    :class:`~app.web.checks.fields.Event` per function index, and ``session_blocks(hash)`` the
    controls a session's events have changed (both read at request time: the page
    is assembled after the server object)."""

    def __init__(self, app, events: Callable[[], dict], api_defaults: dict,
                 session_blocks: Callable[[str], Optional[dict]] = lambda _: None,
                 results_pending: Callable[[str, str], bool] = lambda session, event: True):
        self.app = app
        self.events = events
        self.api_defaults = {name: list(values) for name, values in api_defaults.items()}  # per endpoint
        self.session_blocks = session_blocks
        self.results_pending = results_pending
        self.chains = Chains()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, root = scope.get("path", ""), scope.get("root_path", "")
        route = _route(path[len(root):] if root and path.startswith(root) else path)
        if scope.get("method") != "POST":
            if route == "/queue/data" and not self.results_pending(_query_value(scope, "session_hash"), ""):
                return await _answer(send, 404, "No run of this session is waiting for its results.")
            call = named_endpoint(route) if route.startswith("/call/") else None
            if call is not None and "/" in call and not self.results_pending("", call.rsplit("/", 1)[1]):
                return await _answer(send, 404, "No call with this id is waiting for its results.")
            return await self.app(scope, receive, send)
        try:
            if route == "/upload":
                await _discard_body(receive)  # read (up to a bound) and dropped, so the client hears the answer
                raise Refusal(403, "This app takes no file uploads.")
            name = None if route in PAGE_ROUTES else named_endpoint(route)
            if name is not None and name not in self.api_defaults:
                known = " and ".join(f"/{n}" for n in self.api_defaults)
                raise Refusal(404, f"There is no API endpoint {name[:60]!r}: the endpoints are {known} "
                                   f"(docs/app.md).")
            if name is None and route not in PAGE_ROUTES:
                return await self.app(scope, receive, send)
            body = await _read_body(receive)
            fixed = self._checked(body, name)
        except Refusal as r:
            return await _answer(send, r.status, r.message)
        await self.app(_with_length(scope, len(fixed)), _replay(fixed, receive), send)

    def _checked(self, body: bytes, name: Optional[str]) -> bytes:
        """The body as Gradio gets it; ``name``: the endpoint a by-name route calls."""
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            raise Refusal(400, "The request body is not JSON.") from None
        if not isinstance(payload, dict):
            raise Refusal(400, "The request body must be a JSON object.")
        if name is not None:
            payload["data"] = complete_api_values(payload.get("data", []), self.api_defaults[name], name)
            return json.dumps(payload).encode("utf-8")
        events = self.events()
        event = events.get(payload.get("fn_index")) if isinstance(payload.get("fn_index"), int) else None
        if event is None:
            raise Refusal(404, "No such event on this page.")
        if event.api is not None:
            payload["data"] = complete_api_values(payload.get("data", []), self.api_defaults[event.api], event.api)
            return json.dumps(payload).encode("utf-8")
        session = payload.get("session_hash")
        if not isinstance(session, str) or not session or len(session) > 100:
            raise Refusal(422, "This event is the page's own; it comes with the page's session.")
        words = refusal(event.inputs, payload.get("data"), self.session_blocks(session))
        if words:
            raise Refusal(422, words)
        fn = payload["fn_index"]
        if event.after is not None and not self.chains.take(session, fn):
            raise Refusal(409, "This event follows another of the page's; it was sent out of order.")
        self.chains.sent(session, fn, events)
        return json.dumps(payload).encode("utf-8")


def _query_value(scope, name: str) -> str:
    """The first value of ``name`` in the request's query string ("" when absent)."""
    from urllib.parse import parse_qs

    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else ""


async def _read_body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refusal(400, "The request ended early.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise Refusal(413, "The request is too large.")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _discard_body(receive) -> None:
    size = 0
    while size <= MAX_BODY:
        message = await receive()
        size += len(message.get("body", b""))
        if message["type"] == "http.disconnect" or not message.get("more_body"):
            return


def _replay(body: bytes, receive):
    """The body once, then the client's own messages (its disconnect, when it goes)."""
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _with_length(scope, length: int):
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(length).encode()))
    return {**scope, "headers": headers}


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"ok": False, "message": message, "detail": message}).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def page_events(blocks) -> dict:
    """fn index -> :class:`~app.web.checks.fields.Event` for every event of ``blocks`` that the
    server runs. An event with no Python function runs in the browser alone (the tabs'
    resize): sent to the server it is no event of the page's, and is refused as such."""
    return {fn_id: Event(tuple(fn.inputs), fn.api_name if fn.api_name in API_NAMES else None, fn.trigger_after)
            for fn_id, fn in blocks.fns.items() if fn.fn is not None}


def results_pending(blocks, session: str, event: str) -> bool:
    """Whether Gradio's queue holds results for ``session`` (the page's stream) or for
    the API call ``event`` (the session it was queued under, found as Gradio's
    ``/call`` route finds it): else that route's stream would fail after starting
    its response."""
    queue = getattr(blocks, "_queue", None)
    if queue is None:
        return False
    if event:
        queued = queue.event_ids_to_events.get(event)
        session = queued.session_hash if queued is not None else next(
            (s for s, ids in queue.pending_event_ids_session.items() if event in ids), event)
    return bool(session) and session in queue.pending_messages_per_session


def session_blocks(blocks, session: str) -> Optional[dict]:
    """The controls of ``session`` as its events left them (None: a session not seen yet).
    Read only: looking a session up through Gradio's holder would create it."""
    state = getattr(blocks, "state_holder", None)
    known = state.session_data.get(session) if state is not None else None
    return known.blocks_config.blocks if known is not None else None
