"""The copy proposer beside a learned drafter (or alone): ``with_copy(drafter)``.

Each step the learned drafter drafts its tree first; the copied guess then joins it,
merged where it carries the drafter's tokens and sharing the drafter's node budget
(the number of nodes the drafter actually drafted: copying never makes a verify
forward longer than the drafter alone would, unless ``keep_above`` lets a likely
copy through; gumiho.proposers.copying has the rule). Alone, the copied guess is
the whole tree (prompt-lookup decoding through the same loop).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ..errors import GumihoError
from ..tree import DraftTree
from .base import Budget, Head, Proposer, ProposerSession, Verified
from .copying import CopySession, CopySettings, copy_head
from .resolve import as_proposer


class CopyDrafter(Proposer):
    """A drafter with the copy proposer beside it, or the copy proposer alone
    (``base`` None). Pass it wherever a drafter goes (gumiho.generate, gumiho.stream,
    the bench, the app). ``base`` is what was given (a drafter or a proposer),
    ``copy`` the copy settings."""

    def __init__(self, base=None, settings: Optional[CopySettings] = None):
        if isinstance(base, CopyDrafter):
            raise GumihoError("This drafter already copies from the context; wrap the drafter itself once.")
        if settings is not None and not isinstance(settings, CopySettings):
            raise GumihoError(f"copy settings must be a CopySettings, e.g. CopySettings(max_tokens=6), or None; "
                              f"got {type(settings).__name__}.")
        try:
            learned = as_proposer(base) if base is not None else None
        except GumihoError:
            raise GumihoError(f"with_copy takes a drafter (from gumiho.load_drafter) or None, "
                              f"got {type(base).__name__}.") from None
        self.base = base
        self.learned = learned
        self.copy = (settings or CopySettings.default_for(base)).validate()

    @property
    def name(self) -> str:
        return "copy" if self.learned is None else f"{self.learned.name}+copy"

    @property
    def cfg(self):
        """The base drafter's configuration (None for the copy proposer alone)."""
        return getattr(self.learned, "cfg", None)

    @property
    def feature_layers(self):
        return self.learned.feature_layers if self.learned is not None else None

    @property
    def sizes_by_cost(self) -> bool:
        return self.learned is not None and self.learned.sizes_by_cost

    @property
    def heads(self) -> tuple[Head, ...]:
        return (self.learned.heads if self.learned is not None else ()) + (copy_head(self.copy),)

    def family_at(self, depth: int) -> str:
        return self.learned.family_at(depth) if self.learned is not None else super().family_at(depth)

    def start(self, prompt_ids: Sequence[int]) -> ProposerSession:
        copier = CopySession(self.copy, prompt_ids)
        if self.learned is None:
            return copier
        return _CopyBeside(self.learned.start(prompt_ids), copier)

    def __repr__(self):
        inner = "none" if self.learned is None else self.learned.name
        return f"CopyDrafter(base={inner}, {self.copy})"


class _CopyBeside(ProposerSession):
    def __init__(self, learned: ProposerSession, copier: CopySession):
        self.learned = learned
        self.copier = copier

    def propose(self, root_token: int, budget: Budget) -> DraftTree:
        tree = self.learned.propose(root_token, budget)
        # The copied guess continues the context, whose last token is the root; it
        # shares the nodes the drafter drafted.
        return self.copier.draft(tree, len(tree) - 1, max_depth=budget.max_depth)

    def update(self, verified: Verified) -> None:
        self.learned.update(verified)
        self.copier.update(verified)


def with_copy(drafter=None, settings: Optional[CopySettings] = None, **overrides) -> CopyDrafter:
    """``drafter`` with the copy proposer beside it; ``with_copy(None)`` is the copy
    proposer alone (with :meth:`CopySettings.alone` unless ``settings`` are given).
    Keyword overrides set CopySettings fields (max_tokens=...) on top of either."""
    if overrides:
        unknown = [k for k in overrides if k not in CopySettings.__dataclass_fields__]
        if unknown:
            raise GumihoError(f"Unknown copy setting(s) {', '.join(map(repr, unknown))}; use "
                              f"{', '.join(CopySettings.__dataclass_fields__)}.")
        start = settings if settings is not None else CopySettings.default_for(drafter)
        settings = dataclasses.replace(start, **overrides)  # a slotted dataclass has no vars()
    return CopyDrafter(drafter, settings)


def split_copy(drafter):
    """(the learned drafter or None, CopySettings or None) of what was passed as a drafter."""
    if isinstance(drafter, CopyDrafter):
        return drafter.base, drafter.copy
    return drafter, None
