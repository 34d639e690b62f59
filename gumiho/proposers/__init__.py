"""Proposers: every way of drafting behind one interface (gumiho.proposers.base).

    Vanilla           no guesses (plain decoding through the same loop)
    LearnedProposer   a drafter of any kind: Gumiho, all-serial, all-parallel, EAGLE-2
    CopyDrafter       the copy proposer beside a learned drafter, or alone (with_copy)

``as_proposer`` turns whatever the library takes as a drafter into one."""
from .base import Budget, Head, Proposer, ProposerSession, Vanilla, Verified
from .combined import CopyDrafter, split_copy, with_copy
from .copying import CopyIndex, CopySession, CopySettings
from .learned import DraftSession, LearnedProposer
from .resolve import as_proposer

__all__ = ["Budget", "CopyDrafter", "CopyIndex", "CopySession", "CopySettings", "DraftSession", "Head",
           "LearnedProposer", "Proposer", "ProposerSession", "Vanilla", "Verified", "as_proposer", "split_copy",
           "with_copy"]
