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
candidate (a point-mass draft), whoever proposed it (gumiho.engine.acceptance).

Beside a drafter the copied nodes compete for the tree's node budget (on a CPU
every node beyond it makes the verify forward longer). Each gets an estimated
path probability, comparable with the drafter's own (the product of its nodes'
draft probabilities):

    q(k-th copied node) = P(the node it hangs from) * c ** k

where c is the copy proposer's conditional acceptance so far in this generation
(accepted copied nodes / copied nodes whose parent was accepted), kept apart for
short matches (1-2 tokens) and long ones (3 or more), each starting from a prior
worth a few observations. The tree keeps the ``budget`` most probable nodes of
both, closed under ancestors, plus every copied node with q >= ``keep_above``
(by default none: the tree stays the drafter's size, so copying never makes a
verify forward longer). Where copying keeps
failing (free-form writing), c falls and its nodes lose to the drafter's; where
it keeps working (summaries, code, worked maths), c rises and its chains grow.

The index is an n-gram table, updated as tokens are accepted: for every n in
1..max_match, the most recent position at which each n-gram ended and was followed
by a token. Appending a token and looking up a suffix each cost O(max_match)
dictionary operations, whatever the context's length: no rescans.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import GumihoError
from ..tree import DraftTree
from .base import COPY, Budget, Head, ProposerSession, Verified
from .selection import add_chain, keep_best


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
class CopySettings:
    """``max_tokens``: the longest copied guess (its nodes are verified on top of
    the drafter's tree); ``min_match``/``max_match``: the shortest suffix that counts
    as a match, and the longest one looked for (longer matches are preferred: the
    longer the shared run, the likelier its continuation is the same too)."""

    # Chosen with research/tune_copy.py (3-4 prompts of each of the six sets, CPU tree,
    # the shipped drafter): 8 copied tokens after a 2-token match gave the most tau for
    # the nodes they take; longer minimum matches copy less where copying pays
    # (summaries, code, worked maths); a 1-token match was no better on balance.
    max_tokens: int = 8
    min_match: int = 2
    max_match: int = 8
    # Copied nodes at least this likely are verified beyond the node budget; 1 (the default)
    # keeps the tree at the drafter's size. On a CPU the first node beyond the budget makes
    # the verify forward some 10% longer, and research/tune_copy.py found no setting that
    # paid for it (0.1 to 0.3: as much speed for more nodes); on a GPU, where a few more
    # nodes cost next to nothing, a lower value lets a good copy run longer.
    keep_above: float = 1.0

    @classmethod
    def alone(cls) -> "CopySettings":
        """The settings for the copy proposer without a drafter. Its guess is then the
        whole tree, and a CPU's verify forward over up to about six tokens costs about
        what a one-token forward does (its matrix products take rows in blocks of about
        six): five copied tokens are nearly free, and with nothing else guessing a
        one-token match is worth trying."""
        return cls(max_tokens=5, min_match=1, max_match=8, keep_above=0.0)

    @classmethod
    def default_for(cls, drafter) -> "CopySettings":
        """The defaults beside ``drafter``, or :meth:`alone` when it is None."""
        return cls() if drafter is not None else cls.alone()

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
        k = self.keep_above
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 <= k <= 1:
            raise GumihoError(f"Copy setting keep_above must be a number from 0 to 1, got {k!r}.")
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


# Priors of the conditional acceptance c, as (accepted, offered) pseudo-counts: what
# research/tune_copy.py's reference answers showed for a 2-token match (a third to a
# half of the first copied tokens right) and for longer ones (over half).
SHORT_PRIOR = (1.2, 4.0)
LONG_PRIOR = (2.2, 4.0)
LONG_MATCH = 3


class CopySession(ProposerSession):
    """One generation's copy proposer: the index of its context and its record of
    how often its guesses were accepted (the estimate c of the module docstring)."""

    def __init__(self, settings: CopySettings, context=()):
        self.settings = settings
        self.index = CopyIndex(settings.max_match)
        self.index.extend(context)
        self.counts = {False: list(SHORT_PRIOR), True: list(LONG_PRIOR)}  # long match? -> [accepted, offered]
        self._last = None  # (long match?, copied node indices, the tree) of the last proposal

    def extend(self, tokens) -> None:
        self.index.extend(tokens)

    def guess(self) -> tuple[list[int], float, bool]:
        """(the copied guess, its conditional acceptance estimate c, long match?)."""
        n, at = self.index.match(self.settings.min_match)
        if n == 0:
            return [], 0.0, False
        long = n >= LONG_MATCH
        acc, offered = self.counts[long]
        return self.index.tokens[at:at + self.settings.max_tokens], acc / offered, long

    def draft(self, tree: DraftTree, budget: int | None, max_depth: int | None = None) -> DraftTree:
        """``tree`` with this step's copied guess in it (see the module docstring for
        how it shares ``budget``; None: no budget, every copied node is kept)."""
        chain, c, long = self.guess()
        self._last = None
        if not chain:
            return tree
        merged = add_chain(tree, chain, max_depth=max_depth, copy_prob=c)
        if budget is not None:
            merged = keep_best(merged, budget, self.settings.keep_above)
        self._last = (long, [i for i in range(len(merged)) if merged.copied[i]], merged)
        return merged

    def observe(self, accepted: list[int]) -> None:
        """After the verify step: the accepted path (node indices) of the tree that
        :meth:`draft` returned; every copied node whose parent was reached counts."""
        if self._last is None:
            return
        long, copied, tree = self._last
        on_path = {0, *accepted}
        counts = self.counts[long]
        for i in copied:
            if tree.parents[i] in on_path:
                counts[1] += 1
                counts[0] += i in on_path
        self._last = None


    # -- the proposer interface (the copy proposer alone) ------------------------------

    def propose(self, root_token: int, budget: Budget) -> DraftTree:
        """Alone, the copied guess is the whole tree: no budget to share."""
        return self.draft(DraftTree.root_only(root_token), None, max_depth=budget.max_depth)

    def update(self, verified: Verified) -> None:
        if verified.tree is not None:
            self.observe(verified.accepted)
        self.extend(verified.tokens)


def copy_head(settings: CopySettings) -> Head:
    return Head(COPY, tuple(range(1, settings.max_tokens + 1)), kind="copy")
