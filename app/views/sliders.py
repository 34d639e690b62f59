"""A slider that passes on a figure typed beyond its track.

Gradio's own slider checks a value against its minimum and maximum before the
handler runs and, for one beyond them (typed into its number box), fails the event:
the page shows "Error" beside a stale result. Where the handler can use any number
and say in words that it lies beyond the track (the What if? costs), that check is
the wrong one, so this slider leaves it to the handler.

Gradio writes a type stub (.pyi) beside a module that defines a component; the
class lives alone here so that the stub is small, and .gitignore keeps it out."""
from __future__ import annotations

import gradio as gr


class FigureSlider(gr.Slider):
    """gr.Slider, drawn by Gradio's own slider, whose value reaches the handler as
    sent: the handler checks it."""

    is_template = True  # drawn by Gradio's slider component (blocks.get_block_name)

    def preprocess(self, payload):
        return payload
