"""What the page calls each head. The library's trees and events say which head
proposed a token by family ("serial", "mlp", "copy", "target") and the proposer's
heads say which kind they belong to; the words are the app's, as the colours are
(app/views/palette.py)."""
from __future__ import annotations

# Each family's words where a kind has none of its own.
HEAD_LABELS = {"serial": "serial Transformer", "mlp": "parallel MLP heads", "copy": "copied from the context"}
# A kind's own words for a family: other projects' drafters keep their names for their heads.
KIND_LABELS = {("serial", "eagle"): "one-layer Transformer", ("serial", "eagle3"): "EAGLE-3 draft layer",
               ("mlp", "medusa"): "Medusa heads"}


def head_label(family: str, kind: str = "") -> str:
    """The legend's words for the heads of ``family`` of a proposer of ``kind``."""
    return KIND_LABELS.get((family, kind), HEAD_LABELS.get(family, family))
