"""The operator's settings of one app server, read once.

Every GUMIHO_* variable the app obeys is read here, by :meth:`AppSettings.from_environment`,
which only the entry points call (``app.py``, ``python -m app``, ``python -m app.web.record``)
with their process's environment; everything below them is handed the object (the hub
carries it: ``ModelHub.settings``). A test or a script builds one with the values it wants,
and nothing it imports reads the environment behind its back (tests/test_house.py checks that).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .access import Access

# The app's limits as shipped (a shared demo on a CPU), tighter than the engine's.
MAX_NEW_TOKENS = 512
MAX_PROMPT_TOKENS = 2048
# Runs waiting for the model thread, at most; one more is refused with "The server is busy".
# A class-sized line: thirty visitors of one lesson, and some room.
MAX_WAITING = 40
# Races shared by link that the server keeps in memory, the newest.
SHARED_RUNS = 50
# The example prompts' recorded runs (app/replays), as shipped.
RECORDINGS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                               "assets", "recordings", "examples.pkl.gz")


def _whole(environ: Mapping[str, str], name: str, default: int) -> int:
    """A whole-number variable; unset or unreadable: ``default`` (a typo must not stop the server)."""
    try:
        return int(environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True)
class AppSettings:
    """One server's settings; the defaults are the app's as shipped, with no variable set."""

    max_new_tokens: int = MAX_NEW_TOKENS  # GUMIHO_APP_MAX_NEW_TOKENS: the race's most new tokens
    max_prompt_tokens: int = MAX_PROMPT_TOKENS  # GUMIHO_APP_MAX_PROMPT_TOKENS
    max_waiting: int = MAX_WAITING  # GUMIHO_APP_MAX_WAITING: runs waiting for the model thread
    # GUMIHO_APP_QUEUE_SIZE: Gradio's queue, for the events that do no model work (and each
    # run's steps for a moment); None: room for every waiting run's steps and a page's polls.
    queue_size: Optional[int] = None
    recordings_file: str = RECORDINGS_FILE  # GUMIHO_APP_RECORDINGS; "" for none (every run live)
    shared_runs: int = SHARED_RUNS  # GUMIHO_APP_SHARED_RUNS
    shared_dir: str = ""  # GUMIHO_APP_SHARED_DIR: a folder that keeps every shared race; "" for none
    # GUMIHO_RUNTIME: the runtime the operator asked for (gumiho.loading.pick_runtime's
    # names), None for the library's "auto"; GUMIHO_LAYOUT: the llama.cpp runtime's 4-bit file.
    runtime: Optional[str] = None
    layout: Optional[str] = None
    gpu_duration_s: Optional[int] = None  # GUMIHO_GPU_DURATION: a fixed ZeroGPU ask (app.core.zerogpu)
    access: Access = field(default_factory=Access)  # GUMIHO_PUBLIC, GUMIHO_ALLOWED_MODELS, ...

    @property
    def queue_limit(self) -> int:
        # An unreadable size (-1 here) is taken as no size given, as a typo in the others is.
        given = self.queue_size if self.queue_size is not None and self.queue_size != -1 else None
        return max(1, given if given is not None else 8 * self.max_waiting)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "AppSettings":
        """The settings ``environ`` (a process's environment) asks for; for the entry points only."""
        duration = (environ.get("GUMIHO_GPU_DURATION") or "").strip()
        return cls(max_new_tokens=_whole(environ, "GUMIHO_APP_MAX_NEW_TOKENS", MAX_NEW_TOKENS),
                   max_prompt_tokens=_whole(environ, "GUMIHO_APP_MAX_PROMPT_TOKENS", MAX_PROMPT_TOKENS),
                   max_waiting=max(1, _whole(environ, "GUMIHO_APP_MAX_WAITING", MAX_WAITING)),
                   queue_size=_whole(environ, "GUMIHO_APP_QUEUE_SIZE", -1) if "GUMIHO_APP_QUEUE_SIZE" in environ
                   else None,
                   recordings_file=environ.get("GUMIHO_APP_RECORDINGS", RECORDINGS_FILE).strip(),
                   shared_runs=max(1, _whole(environ, "GUMIHO_APP_SHARED_RUNS", SHARED_RUNS)),
                   shared_dir=(environ.get("GUMIHO_APP_SHARED_DIR") or "").strip(),
                   runtime=environ.get("GUMIHO_RUNTIME") or None, layout=environ.get("GUMIHO_LAYOUT") or None,
                   gpu_duration_s=int(duration) if duration.isdigit() and int(duration) > 0 else None,
                   access=Access.from_env(environ))


__all__ = ["AppSettings", "MAX_NEW_TOKENS", "MAX_PROMPT_TOKENS", "MAX_WAITING", "RECORDINGS_FILE", "SHARED_RUNS"]
