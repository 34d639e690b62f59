"""Where a race shown on the page came from, said first and last in its result line: a
recorded example names the machine and day it was timed on (a replay is honest only when
it says it is one), and a live race gives the link that replays it for others."""
from __future__ import annotations

from .escape import esc
from .records import RaceResult


def provenance(result: RaceResult) -> str:
    """A recorded race says so first: where and when it was timed (a replay is honest
    only when it says it is one); *Run it live* times it again here."""
    if not result.recorded_on:
        return ""
    return (f'<div class="gm-recorded" role="note">Recorded on {esc(result.recorded_on)}, replayed at its recorded '
            f"pace: the same race for everyone who clicks this example. <b>Run it live</b> to time it on this "
            f"machine now.</div>")


def share_line(result: RaceResult) -> str:
    """A live race's link: the page's own address with the run's id (a relative link,
    so it is right on a Space and on a laptop alike); whoever opens it sees this race
    replayed."""
    if not result.run_id or result.recorded_on:
        return ""
    return (f'<div class="gm-share">Share this race: <a href="?run={esc(result.run_id)}" target="_blank" '
            f'rel="noopener" id="gm-share-link">link to this run</a> (it replays this race, as timed here, for '
            f"anyone who opens it).</div>")

