"""The third guesser: continuations copied from the context (prompt + answer so far).

Summaries, answers grounded in a given passage, edits and code repeat long runs of
the text they were given. A learned drafter guesses such a run token by token and
loses it at its first miss; a lookup finds it whole. At every step:

    suffix  = the longest run of the last tokens (at most ``max_match``, at least
              ``min_match``) that also occurred earlier in the context
    guess   = the tokens that followed its most recent earlier occurrence, up to
              ``max_tokens`` of them

The guess is one more chain of candidates in the draft tree (gumiho.tree.add_chain):
merged into the drafter's nodes where they carry the same tokens, a branch of its
own below the first difference. The target verifies it in the same forward as the
drafter's nodes, with the same acceptance rules, so the output stays exactly the
target's at every temperature: the sampling rule treats every child as a fixed
candidate (a point-mass draft), whoever proposed it (gumiho.verify).

The index is an n-gram table, updated as tokens are accepted: for every n in
1..max_match, the most recent position at which each n-gram ended and was followed
by a token. Appending a token and looking up a suffix each cost O(max_match)
dictionary operations, whatever the context's length: no rescans.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import GumihoError


@dataclass
class CopySettings:
    """``max_tokens``: the longest copied guess (its nodes are verified on top of
    the drafter's tree); ``min_match``/``max_match``: the shortest suffix that counts
    as a match, and the longest one looked for (longer matches are preferred: the
    longer the shared run, the likelier its continuation is the same too)."""

    # Chosen with scripts/tune_copy.py (3 prompts of each of the six sets, CPU tree,
    # the shipped drafter): 8 copied tokens after a 2-token match gave the most tau for
    # the verify cost it adds; longer minimum matches copy less where copying pays
    # (summaries, code, worked maths), shorter ones guess wrong too often.
    max_tokens: int = 8
    min_match: int = 2
    max_match: int = 8

    @classmethod
    def alone(cls) -> "CopySettings":
        """The settings for the copy proposer without a drafter. Its guess is then the
        whole tree, and a CPU's verify forward over up to about six tokens costs about
        what a one-token forward does (its matrix products take rows in blocks of about
        six): five copied tokens are nearly free, and with nothing else guessing a
        one-token match is worth trying."""
        return cls(max_tokens=5, min_match=1, max_match=8)

    def validate(self) -> "CopySettings":
        for name in ("max_tokens", "min_match", "max_match"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise GumihoError(f"Copy setting {name} must be a whole number >= 1, got {v!r}.")
        if self.max_tokens > 64:
            raise GumihoError(f"Copy setting max_tokens={self.max_tokens} is too large; use at most 64.")
        if self.max_match > 32:
            raise GumihoError(f"Copy setting max_match={self.max_match} is too large; use at most 32.")
        if self.min_match > self.max_match:
            raise GumihoError(f"Copy setting min_match={self.min_match} is above max_match={self.max_match}.")
        return self


class CopyIndex:
    """The context's tokens and, per n-gram length, where each n-gram last ended.

    ``_ends[n][gram]`` = i means tokens[i-n:i] == gram and i < len(tokens): the
    n-gram is followed by tokens[i]. An n-gram ending at the very end of the context
    has no follower yet, so it enters the table only when the next token arrives;
    a lookup of the current suffix therefore always finds an *earlier* occurrence."""

    def __init__(self, max_match: int = 8):
        if isinstance(max_match, bool) or not isinstance(max_match, int) or max_match < 1:
            raise GumihoError(f"max_match must be a whole number >= 1, got {max_match!r}.")
        self.max_match = max_match
        self.tokens: list[int] = []
        self._ends: list[dict] = [dict() for _ in range(max_match + 1)]  # index 0 unused

    def __len__(self):
        return len(self.tokens)

    def extend(self, tokens) -> None:
        for t in tokens:
            self.append(int(t))

    def append(self, token: int) -> None:
        toks = self.tokens
        i = len(toks)  # the position ``token`` takes: it follows every n-gram ending here
        for n in range(1, min(self.max_match, i) + 1):
            self._ends[n][tuple(toks[i - n:i])] = i
        toks.append(token)

    def match(self, min_match: int = 1) -> tuple[int, int]:
        """(length, follower position) of the longest suffix of the context, between
        ``min_match`` and ``max_match`` tokens long, that occurred earlier; (0, -1)
        when there is none."""
        toks = self.tokens
        for n in range(min(self.max_match, len(toks) - 1), min_match - 1, -1):
            at = self._ends[n].get(tuple(toks[len(toks) - n:]))
            if at is not None:
                return n, at
        return 0, -1

    def continuation(self, max_tokens: int, min_match: int = 1) -> list[int]:
        """The tokens that followed the longest earlier occurrence of the current
        suffix (its most recent one), at most ``max_tokens``; [] without a match.
        A repeating pattern may run into the present end: the guess stops there."""
        n, at = self.match(min_match)
        if n == 0:
            return []
        return self.tokens[at:at + max_tokens]


class CopyDrafter:
    """A drafter with the copy proposer beside it, or the copy proposer alone
    (``base`` None: prompt-lookup decoding through the same loop). Pass it wherever
    a drafter goes (gumiho.generate, gumiho.stream, the bench, the app); the decode
    loop reads ``base`` and ``copy`` off it (see :func:`split_copy`)."""

    def __init__(self, base=None, settings: Optional[CopySettings] = None):
        if isinstance(base, CopyDrafter):
            raise GumihoError("This drafter already copies from the context; wrap the drafter itself once.")
        if base is not None and not hasattr(base, "new_session"):
            raise GumihoError(f"with_copy takes a drafter (from gumiho.load_drafter) or None, "
                              f"got {type(base).__name__}.")
        if settings is not None and not isinstance(settings, CopySettings):
            raise GumihoError(f"copy settings must be a CopySettings, e.g. CopySettings(max_tokens=6), or None; "
                              f"got {type(settings).__name__}.")
        self.base = base
        self.copy = (settings or (CopySettings() if base is not None else CopySettings.alone())).validate()

    @property
    def cfg(self):
        """The base drafter's configuration (None for the copy proposer alone)."""
        return self.base.cfg if self.base is not None else None

    @property
    def max_depth(self) -> int:
        """The deepest a guess reaches: the base drafter's depth or the longest copy."""
        return max(self.cfg.max_depth if self.cfg is not None else 0, self.copy.max_tokens)

    def __repr__(self):
        inner = "none" if self.base is None else getattr(self.cfg, "kind", type(self.base).__name__)
        return f"CopyDrafter(base={inner}, {self.copy})"


def with_copy(drafter=None, settings: Optional[CopySettings] = None, **overrides) -> CopyDrafter:
    """``drafter`` with the copy proposer beside it; ``with_copy(None)`` is the copy
    proposer alone (with :meth:`CopySettings.alone` unless ``settings`` are given).
    Keyword overrides set CopySettings fields (max_tokens=...) on top of either."""
    if overrides:
        unknown = [k for k in overrides if k not in CopySettings.__dataclass_fields__]
        if unknown:
            raise GumihoError(f"Unknown copy setting(s) {', '.join(map(repr, unknown))}; use "
                              f"{', '.join(CopySettings.__dataclass_fields__)}.")
        base = settings if settings is not None else (CopySettings() if drafter is not None else CopySettings.alone())
        settings = CopySettings(**{**vars(base), **overrides})
    return CopyDrafter(drafter, settings)


def split_copy(drafter):
    """(the learned drafter or None, CopySettings or None) of what was passed as a drafter."""
    if isinstance(drafter, CopyDrafter):
        return drafter.base, drafter.copy
    return drafter, None
