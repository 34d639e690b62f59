"""Serving: the page goes up first, the model loads behind it."""
from __future__ import annotations

import logging
import os
import sys
from typing import Optional

from starlette.middleware import Middleware

from ..core import zerogpu
from ..core.settings import AppSettings
from ..models.hub import ModelHub
from .checks.requests import Guard, page_events, results_pending, session_blocks
from .layout import build_app, load_css


def _quiet_leaked_event_loops(default):
    """An unraisable-exception hook that drops one harmless failure of the framework's.

    Serving on a Space (SYSTEM=spaces), Gradio makes event loops it never closes
    (``gradio.utils.safe_get_stop_event``, once per app it builds) and, with its Spaces
    reloader running, their self-pipes end up closed under them; the garbage
    collector's close of such a loop then fails with "Invalid file descriptor: -1" and
    prints a traceback, twice at every start, for any Gradio app (a four-line one shows
    it too). Those loops never ran anything. Only that failure is dropped; every other
    goes to ``default`` as before."""
    def hook(unraisable):
        if (isinstance(unraisable.exc_value, ValueError) and "Invalid file descriptor: -1" in str(unraisable.exc_value)
                and getattr(unraisable.object, "__qualname__", "") == "BaseEventLoop.__del__"):
            return
        default(unraisable)
    hook.quiets_leaked_loops = True
    return hook


def serve(host: Optional[str] = None, port: Optional[int] = None, hub: Optional[ModelHub] = None, block: bool = True,
          settings: Optional[AppSettings] = None):
    """Build and launch the app on ``host:port`` (default: GRADIO_SERVER_NAME /
    GRADIO_SERVER_PORT, else 127.0.0.1:7860) with the operator's ``settings`` (read by the
    entry point, app.py or ``python -m app``; None: the app's as shipped), then start loading the model in
    the background, so the first page is served before the model is ready. On a
    ZeroGPU Space the model loads first instead, before the launch (app/core/zerogpu.py)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not getattr(sys.unraisablehook, "quiets_leaked_loops", False):
        sys.unraisablehook = _quiet_leaked_event_loops(sys.unraisablehook)
    host = host or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = int(port or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    hub = hub or ModelHub(settings=settings)
    if zerogpu.ZERO_GPU:
        hub.start()
    demo = build_app(hub)
    # No run history: visitors' prompts are not recorded anywhere. No error text of
    # the framework's own reaches a client (show_error=False): the app's messages are
    # its banners, toasts and the API's ``ok: false``. The guard refuses uploads (the
    # app has no file inputs; the size cap is a second line) and calls of anything
    # but the documented API (app/web/checks/requests.py).
    guard = Middleware(Guard, events=lambda: page_events(demo), api_defaults=demo.api_defaults,
                       session_blocks=lambda session: session_blocks(demo, session),
                       results_pending=lambda session, event: results_pending(demo, session, event))
    demo.launch(server_name=host, server_port=port, css=load_css(), prevent_thread_lock=True, show_error=False,
                run_history=False, max_file_size="1kb", app_kwargs={"middleware": [guard]})
    log = logging.getLogger("gumiho.app")
    log.info("serving on http://%s:%d", host, port)
    if hub.access.public:
        log.info("public mode: the advanced box takes only %s%s", ", ".join(hub.access.listed()),
                 " and local paths" if hub.access.local_paths else " (no local paths)")
    hub.start()  # (already done on ZeroGPU)
    if block:
        demo.block_thread()
    return demo

