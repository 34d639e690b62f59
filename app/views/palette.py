"""Colours, one place for both the token rendering (CSS) and the plots.

Serial Transformer positions are blues, MLP head positions are oranges, and the
shade says the draft position: the first position of a family is the deepest
shade, later positions get lighter. Tokens copied from the context (the copy
proposer, gumiho.proposers.copying) are one green whatever their position, and also carry
a dotted underline (CSS), so they read without colour too. The target's own
(bonus) tokens are neutral.
"""
from __future__ import annotations

import colorsys

from gumiho.heads import HeadFamily

SERIAL_HUE = 215  # blue
MLP_HUE = 28  # orange
COPY_HUE = 145  # green
COPY_BG = "#bfe8cc"
COPY_PLOT = "#2f9e5b"
NEUTRAL_BG = "#ececec"
NEUTRAL_PLOT = "#9a9a9a"
REJECTED_PLOT = "#c8c8c8"
ACCEPT_EDGE = "#1b1b1b"
# A decoder as a whole, in the plots of speed and of every drafter: never a head's
# colour (blue, orange, green mean who drafted a token everywhere on the page).
GUMIHO_LINE = "#1b1b1b"
VANILLA_LINE = "#6b6b6b"


def _hsl(h: float, s: float, light: float) -> str:
    r, g, b = colorsys.hls_to_rgb(h / 360.0, light, s)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def _shade(rank: int, count: int, lo: float, hi: float) -> float:
    """Lightness for the rank-th position (0-based) of a family of ``count``."""
    if count <= 1:
        return lo
    return lo + (hi - lo) * rank / (count - 1)


def family_hue(head: str) -> int:
    return {HeadFamily.SERIAL: SERIAL_HUE, HeadFamily.COPY: COPY_HUE}.get(head, MLP_HUE)


def token_background(head: str, rank: int, count: int) -> str:
    """Background of a drafted token: ``rank`` is its place inside its family
    (0 = the family's first draft position). Light enough for dark text."""
    if head == HeadFamily.COPY:
        return COPY_BG
    if head not in (HeadFamily.SERIAL, HeadFamily.MLP):
        return NEUTRAL_BG
    return _hsl(family_hue(head), 0.85, _shade(rank, count, 0.66, 0.90))


def plot_colour(head: str, rank: int, count: int) -> str:
    """The same shade, deeper, for bars and tree nodes."""
    if head == HeadFamily.COPY:
        return COPY_PLOT
    if head not in (HeadFamily.SERIAL, HeadFamily.MLP):
        return NEUTRAL_PLOT
    return _hsl(family_hue(head), 0.75, _shade(rank, count, 0.40, 0.72))


def position_colour(position: int, serial_positions: int, max_depth: int, plot: bool = True) -> str:
    """Colour of draft position ``position`` (1-based) for a drafter with
    ``serial_positions`` serial positions out of ``max_depth``; 0 = target."""
    if position <= 0:
        return NEUTRAL_PLOT if plot else NEUTRAL_BG
    head, rank, count = family_rank(position, serial_positions, max_depth)
    return plot_colour(head, rank, count) if plot else token_background(head, rank, count)


def family_rank(position: int, serial_positions: int, max_depth: int) -> tuple[str, int, int]:
    """(head, rank inside its family, size of the family) of draft position d."""
    if position <= serial_positions:
        return HeadFamily.SERIAL, position - 1, serial_positions
    return HeadFamily.MLP, position - serial_positions - 1, max(max_depth - serial_positions, 1)
