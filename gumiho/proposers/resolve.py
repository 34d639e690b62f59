"""What the library takes as a drafter, as a proposer: None (vanilla decoding), a
drafter from gumiho.load_drafter, or any Proposer (gumiho.proposers)."""
from __future__ import annotations

from ..drafter import Drafter
from ..errors import GumihoError
from .base import Proposer, Vanilla
from .learned import LearnedProposer


def as_proposer(drafter) -> Proposer:
    if drafter is None:
        return Vanilla()
    if isinstance(drafter, Proposer):
        return drafter
    if isinstance(drafter, Drafter):
        return LearnedProposer(drafter)
    raise GumihoError(f"A drafter must be None (plain decoding), a drafter from gumiho.load_drafter, or a "
                      f"gumiho.proposers.Proposer (with_copy(...) gives one); got {type(drafter).__name__}.")
