"""Text made safe for the page's HTML. Gradio renders an HTML component's value as
markup, and its frontend reads a few more characters specially (``$`` starts math,
braces and backticks template), so those are written as entities too."""
from __future__ import annotations

import html

_EXTRA = {"$": "&#36;", "{": "&#123;", "}": "&#125;", "`": "&#96;", "\\": "&#92;"}


def esc(text) -> str:
    """Escape text for HTML content and attribute values."""
    out = html.escape(str(text), quote=True)
    for ch, ent in _EXTRA.items():
        out = out.replace(ch, ent)
    return out
