"""Both samples of the losslessness experiment side by side: a pair of bars per
sequence of first tokens (its share of the vanilla samples, of the speculative ones),
the 15 most frequent sequences, the rare ones the test pools as one bar."""
from __future__ import annotations

from typing import Optional

from gumiho.lab.lossless import rare_outcomes
from gumiho.lab.rules import RULE_NAMES

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
    # The bars follow the test's own cells: the sequences it pools (expected fewer than 5
    # times) are one bar, labelled with the count the verdict gives; of the others the
    # most frequent are shown, and any beyond SHOWN are a bar of their own.
    pooled = rare_outcomes(c.vanilla, c.speculative)
    ranked = sorted((seq for seq in total if seq not in pooled), key=lambda seq: (-total[seq], result.texts[seq]))
    shown = ranked[:SHOWN]
    groups = [(f"{len(ranked) - SHOWN} more sequences", ranked[SHOWN:])] if len(ranked) > SHOWN else []
    if pooled:
        groups.append((f"{len(pooled)} rare one{'s' if len(pooled) != 1 else ''} pooled by the test", sorted(pooled)))
    labels = [result.texts[seq] for seq in shown] + [label for label, _ in groups]
    for name, sample, colour in (("vanilla", c.vanilla, palette.VANILLA_LINE),
                                 (f"speculative ({RULE_NAMES[c.rule]})", c.speculative, palette.GUMIHO_LINE)):
        n = max(1, sum(sample.values()))
        shares = ([sample.get(seq, 0) / n for seq in shown]
                  + [sum(sample.get(s, 0) for s in group) / n for _, group in groups])
        fig.data.append({"type": "bar", "orientation": "h", "name": name, "y": labels, "x": shares,
                         "marker": {"color": colour},
                         "hovertemplate": "%{y}: %{x:.1%}<extra>" + name + "</extra>"})
    fig.layout["barmode"] = "group"
    _legend_below(fig)
    return fig
