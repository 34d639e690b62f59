"""The proposer interface: every way of guessing tokens for the target to verify.

The decode loop (gumiho.engine.decode) knows only this interface. One generation runs

    session = proposer.start(prompt_ids)
    session.update(Verified(tokens=[first], states=prefill states))      after the prefill
    repeat:
        tree = session.propose(root_token, budget)                       a DraftTree
        ... the target verifies the tree in one forward, keeps a path ...
        session.update(Verified(tokens=path + [bonus], states=..., tree=tree, accepted=path))

as transformers' candidate generators (get candidates; update after verification)
and vLLM's proposers (one ``propose`` per method) do. A proposer is the method and
its weights; a session is one generation's state (caches, counters), so one
proposer serves any number of generations, one after another or side by side.

Every proposer names its heads (:class:`Head`): which draft positions each family
fills. Every node of a draft tree records the head that proposed it
(``DraftTree.heads``), the events carry it, and the app words and colours it
(app/views/heads.py, app/views/palette.py).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..engine.verifycost import VerifyCost
from ..heads import HeadFamily
from ..tree import DraftTree, TreeSettings

# The head families the trees and events speak of (gumiho.heads); the app gives each its words and a hue.
SERIAL, MLP, COPY, TARGET = HeadFamily.SERIAL, HeadFamily.MLP, HeadFamily.COPY, HeadFamily.TARGET


@dataclass(frozen=True)
class Head:
    """One group of draft positions that a proposer fills the same way.

    ``family``: the word the trees and events carry for its tokens
    (``DraftTree.heads``, ``EmittedToken.head``): "serial" (a model run once per
    position, on its own outputs), "mlp" (heads that guess several positions at
    once) or "copy" (tokens copied from the context). ``positions``: the draft
    positions (1 = the first token after the root) it proposes. ``kind``: the kind
    of proposer it belongs to ("gumiho", "eagle3", "medusa", "copy", ...), by which
    a reader may word it (the app calls Medusa's MLP heads "Medusa heads")."""

    family: HeadFamily
    positions: tuple[int, ...]
    kind: str = field(default="", kw_only=True)


@dataclass
class Budget:
    """How much a step may draft: the tree's shape and node budget (``tree``), the
    deepest position the context window leaves room for (``max_depth``; None: no
    limit), and, for a cost-aware tree, the target's measured verify cost."""

    tree: TreeSettings
    max_depth: Optional[int] = None
    verify_cost: Optional[VerifyCost] = None

    @property
    def nodes(self) -> int:
        """Drafted nodes a step may verify (the root is extra)."""
        return self.tree.total_tokens


@dataclass
class Verified:
    """What one target forward settled.

    ``tokens``: the tokens it added to the context (the first token after the
    prefill; the accepted path's tokens and the bonus token after a verify).
    ``states``: what the target handed over [len(tokens) or more, W] (its final-norm
    hidden states, or the layers of the proposer's ``feature_layers``) at the last
    positions of the context before ``tokens`` was added: row i is the state that
    the target chose the token after position i from. After a verify these are the
    root's and the accepted nodes' states (one per new token); after the prefill,
    every prompt position's. ``tree``/``accepted``: the verified tree and its
    accepted node indices (root excluded); None/[] after the prefill."""

    tokens: list[int]
    states: object  # torch.Tensor [T, W]
    tree: Optional[DraftTree] = None
    accepted: list[int] = field(default_factory=list)


class ProposerSession(ABC):
    """One generation's drafting state. Abstract: a session that lacks a method fails
    when it is made, not at its first step."""

    @abstractmethod
    def propose(self, root_token: int, budget: Budget) -> DraftTree:
        """A draft tree below ``root_token`` (the last token of the context, which the
        target has not processed yet) within ``budget``."""

    @abstractmethod
    def update(self, verified: Verified) -> None:
        """Take what the target settled (see :class:`Verified`)."""


class Proposer(ABC):
    """A way of drafting: learned heads, copying from the context, both, or none.

    Subclasses set ``name`` (what the bench and the app call the method) and give
    ``heads`` and ``start`` (abstract: a subclass without them cannot be made). ``feature_layers``: the target layers
    whose states ``Verified.states`` carries (None: the final-norm states).
    ``sizes_by_cost``: whether a cost-aware tree sizes this proposer's steps from
    the measured verify cost (then the loop measures it before the first step)."""

    name: str = "proposer"
    feature_layers: Optional[tuple] = None
    sizes_by_cost: bool = False

    @property
    @abstractmethod
    def heads(self) -> tuple[Head, ...]:
        """The heads this proposer drafts with, each with its family and positions."""

    @property
    def max_depth(self) -> int:
        """The deepest draft position this proposer can fill (0: none)."""
        return max((p for h in self.heads for p in h.positions), default=0)

    @abstractmethod
    def start(self, prompt_ids: Sequence[int]) -> ProposerSession:
        """A drafting session for one generation of ``prompt_ids``."""

    def family_at(self, depth: int) -> str:
        """The head family of a drafted node at ``depth`` that was not copied."""
        for h in self.heads:
            if h.family != COPY and depth in h.positions:
                return h.family
        return COPY


class _NoDrafting(ProposerSession):
    def propose(self, root_token: int, budget: Budget) -> DraftTree:
        return DraftTree.root_only(root_token)

    def update(self, verified: Verified) -> None:
        pass


class Vanilla(Proposer):
    """No guesses: every tree is the root alone, so the loop is plain token-by-token
    decoding with a KV cache, the reference the speculative output is compared with."""

    name = "vanilla"

    @property
    def heads(self) -> tuple[Head, ...]:
        return ()

    def start(self, prompt_ids: Sequence[int]) -> ProposerSession:
        return _NoDrafting()

    def __repr__(self):
        return "Vanilla()"
