"""Where the app's model work runs: on a CPU, on a machine's own GPU, or on a
ZeroGPU Space, where the `spaces` package lends a GPU for each call of a
function decorated with ``spaces.GPU``.

Off ZeroGPU nothing here changes anything: :func:`on_gpu` returns the job it is
given, and the device is "cuda" whenever torch sees a GPU (the paper's tree,
``TreeSettings.for_device``), "cpu" otherwise.

On ZeroGPU the process that serves the page never has a GPU. Importing
`spaces` there patches torch: ``torch.cuda.is_available()`` says yes, and a
model moved to "cuda" is kept aside in memory. Each decorated call is sent to a
worker process forked from the server, which is given a GPU for the call and
gets the kept-aside tensors moved onto it. From how `spaces` does that:

- it must be imported before anything initialises CUDA, so this module imports
  it first and ``app/__init__.py`` imports this module first;
- its torch patch is thread-local (the importing thread only), so the default
  model must be moved to "cuda" on the main thread, and before the server
  launches, when `spaces` packs those tensors for the workers (``ModelHub.start``
  and ``serve`` do that on ZeroGPU);
- a decorated function's arguments and result are pickled across the process
  boundary, so a job travels as the name of its function and the request, never
  as a closure over the hub with its threads and locks;
- the worker is a copy of the server as it was when forked: the model thread is
  not there, and whatever the job changes in the worker (a stop flag, a progress
  counter, a cache) stays there. Only the result comes back.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import os
import threading
import weakref
from typing import Callable


def _flag(value) -> bool:
    """The same reading of a yes/no variable as the `spaces` package's."""
    return value is not None and str(value).lower() in ("1", "t", "true")


# The variable `spaces` itself reads to know that it runs on ZeroGPU hardware.
ZERO_GPU = _flag(os.environ.get("SPACES_ZERO_GPU"))

if ZERO_GPU:
    import spaces  # noqa: F401  (before torch is used: it patches torch's CUDA calls)

import torch  # noqa: E402

from gumiho import GumihoError  # noqa: E402


def model_device() -> str:
    """The device the default model loads on and the trees are sized for."""
    return "cuda" if torch.cuda.is_available() else "cpu"


# -- the hubs a GPU worker can find ----------------------------------------------------------

_HUBS: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_KEYS = itertools.count(1)


def remember_hub(hub) -> int:
    """A key under which a GPU worker finds its own copy of ``hub``. Taken when the
    hub is created: a worker forked later has the key, one forked earlier would not."""
    key = next(_KEYS)
    _HUBS[key] = hub
    return key


def _find(module: str, qualname: str) -> Callable:
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)  # the job itself, even where its module decorated it with on_gpu


def run_on_gpu_worker(module: str, qualname: str, hub_key: int, req) -> tuple[bool, object]:
    """In the GPU worker: the job ``module.qualname(hub, req, stop)`` on the worker's
    copy of the hub. (True, result), or (False, message) for a GumihoError, whose
    text the page shows; `spaces` would replace it with a generic error otherwise."""
    hub = _HUBS.get(hub_key)
    if hub is None:
        return False, "The model hub of this request is gone; reload the page."
    try:
        return True, _find(module, qualname)(hub, req, threading.Event())
    except GumihoError as e:
        return False, str(e)


def gpu_seconds(module: str, qualname: str, hub_key: int, req) -> int:
    """How long a job asks ZeroGPU for. A short ask gets a GPU sooner, and a visitor's
    remaining daily quota must cover it, so it grows with the request: the worker's
    start and the model's move to the GPU, then two decodes of up to max_new_tokens
    (vanilla and Gumiho), and a download and load for a model other than the default.
    The hub's settings may fix it (GUMIHO_GPU_DURATION, seconds). Estimates, not measured on ZeroGPU."""
    fixed = getattr(getattr(_HUBS.get(hub_key), "settings", None), "gpu_duration_s", None)
    if fixed:
        return int(fixed)
    seconds = 20 + 0.1 * int(req.settings.max_new_tokens)
    if getattr(req, "target", ""):
        seconds += 120
    return int(seconds)


if ZERO_GPU:
    # Decorated at import, before the server launches: `spaces` registers the
    # Space's GPU functions at launch.
    gpu_call = spaces.GPU(duration=gpu_seconds)(run_on_gpu_worker)
else:
    gpu_call = run_on_gpu_worker


def on_gpu(job: Callable) -> Callable:
    """``job(hub, req, stop, ...)``, a model job that the app runs on its model
    thread, as it must run here: the job itself off ZeroGPU; on ZeroGPU, a stand-in
    that runs it in a GPU worker and returns its result.

    The stand-in sends the job's name, the hub's key and the request; the worker
    runs the job with a stop flag of its own, so on ZeroGPU the page's Stop button
    and progress counter cannot reach a generation once its GPU call has begun
    (each call is bounded by the request's max new tokens)."""
    if not ZERO_GPU:
        return job
    inner = inspect.unwrap(job)
    module, qualname = inner.__module__, inner.__qualname__

    @functools.wraps(job)
    def on_a_gpu_worker(hub, req, *_unsent, **_unsent_kw):
        key = getattr(hub, "gpu_key", None) or remember_hub(hub)
        try:
            ok, value = gpu_call(module, qualname, key, req)
        except GumihoError:
            raise
        except Exception as e:
            # `spaces` reports quota and worker failures as gradio errors; the page
            # shows a GumihoError's text and hides every other error's.
            import gradio as gr

            if isinstance(e, gr.Error):
                text, title = str(getattr(e, "message", "") or e), str(getattr(e, "title", "") or "")
                raise GumihoError(f"{title}: {text}" if title and title != "Error" else text) from None
            raise
        if not ok:
            raise GumihoError(value)
        return value

    return on_a_gpu_worker
