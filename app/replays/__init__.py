"""Runs computed once and replayed to many: the example prompts' recordings (made
on a quiet machine by ``python -m app.web.record`` and shipped with the app),
and the live runs a visitor shares by link. A class of thirty clicking the same
example gets it at once, and every replay says what it is."""
from .store import (
    LIVE,
    RECORDED,
    Recordings,
    Replays,
    SharedRuns,
    machine_words,
    recorded_note,
    request_key,
    setup_of,
    shown_as_recorded,
)

__all__ = ["LIVE", "RECORDED", "Recordings", "Replays", "SharedRuns", "machine_words", "recorded_note", "request_key", "setup_of", "shown_as_recorded"]
