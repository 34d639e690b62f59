"""Who proposed a draft token: the head families that the draft trees, the step
events, the metrics, the bench records and the app all speak of.

A ``StrEnum``: each member is its word ("serial", ...), so records, JSON and the
page's CSS classes read as before, and a member equals its word."""
from enum import StrEnum


class HeadFamily(StrEnum):
    SERIAL = "serial"  # a model run once per position, on its own outputs (Gumiho's Transformer, EAGLE)
    MLP = "mlp"  # heads that guess several positions at once from one input (Gumiho's MLP heads, Medusa)
    COPY = "copy"  # tokens copied from the context (gumiho.proposers.copying)
    TARGET = "target"  # the target's own token: a tree's root, a step's bonus token
