"""Both samples of the losslessness experiment side by side: a pair of bars per
sequence of first tokens (its share of the vanilla samples, of the speculative ones),
the 15 most frequent sequences and the rest as "other"."""
from __future__ import annotations

from typing import Optional

from ..views import palette
from ..views.figures import Figure, _figure, _legend_below, _note
from .run import LosslessResult

SHOWN = 15


def samples_figure(result: Optional[LosslessResult]) -> Figure:
    fig = _figure("First tokens: vanilla sampling and speculative sampling", height=560,
                  xaxis={"title": {"text": "share of the samples"}, "rangemode": "tozero"},
                  yaxis={"autorange": "reversed", "automargin": True})
    if result is None:
        _note(fig, "Run the experiment: its two samples appear here.")
        return fig
    c = result.check
    total = {seq: c.vanilla.get(seq, 0) + c.speculative.get(seq, 0) for seq in set(c.vanilla) | set(c.speculative)}
    ranked = sorted(total, key=lambda seq: (-total[seq], result.texts[seq]))
    shown, rest = ranked[:SHOWN], ranked[SHOWN:]
    labels = [result.texts[seq] for seq in shown] + ([f"other ({len(rest)} sequences)"] if rest else [])
    for name, sample, colour in (("vanilla", c.vanilla, palette.VANILLA_LINE),
                                 (f"speculative ({c.rule})", c.speculative, palette.GUMIHO_LINE)):
        n = max(1, sum(sample.values()))
        shares = [sample.get(seq, 0) / n for seq in shown] + ([sum(sample.get(s, 0) for s in rest) / n] if rest else [])
        fig.data.append({"type": "bar", "orientation": "h", "name": name, "y": labels, "x": shares,
                         "marker": {"color": colour},
                         "hovertemplate": "%{y}: %{x:.1%}<extra>" + name + "</extra>"})
    fig.layout["barmode"] = "group"
    _legend_below(fig)
    return fig
