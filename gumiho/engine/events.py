"""What one decoding step produced. Vanilla and speculative decoding emit the same
event type, so the UI, the metrics and the benchmark treat both the same way."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..heads import HeadFamily
from ..tree import DraftTree


@dataclass
class EmittedToken:
    token: int
    position: int  # draft position d (1 = first drafted token) of the head that proposed it; 0 = the target's own token
    head: HeadFamily  # who proposed it: serial, mlp, copy (copied from the context) or the target itself
    draft_prob: Optional[float]  # drafter's probability of this token given its parent; None for target tokens


@dataclass
class RejectedToken:
    token: int
    position: int
    head: HeadFamily
    draft_prob: float


@dataclass
class NodeCheck:
    """One drafted node the target checked during a verify step, and the rule's decision.

    The acceptance rule walks the tree from the root: at the current node it tries the
    children one at a time (``DraftTree.children()`` order, best draft probability
    first) until one is accepted, then moves to it; a node where every child is
    rejected (or that has none) is where the path breaks. A step's ``checks`` list
    every node tried, in the order tried, so the walk can be replayed from them alone:
    a check with ``accepted`` moves the walk to ``node``; the checks after it are that
    node's children.

    Sampling (temperature > 0), the engine's rule (gumiho.engine.acceptance):

    * ``rule_q`` is the draft probability the rule divides by. This engine drafts the
      top-k tokens deterministically, so each child is a point mass, q = 1.
    * ``target_prob`` is p(token) under the distribution the child was tested against:
      the target's processed distribution at the parent (temperature, top-k, top-p)
      with the siblings rejected before it removed and the rest renormalised.
    * ``accept_prob`` = min(1, target_prob / rule_q), and ``accepted`` is exactly
      ``uniform < accept_prob``, ``uniform`` the draw u ~ U[0, 1) the child was tested
      with. (The rule itself decides u * mass < p(token), an exact product in double
      precision; where the quotient's rounding would disagree with it, ``accept_prob``
      is moved by one unit in the last place so the record states the decision made.)

    Greedy (temperature 0): children are tried in the same order until the one whose
    token is the target's argmax at the parent. ``accepted`` iff the token is that
    argmax; ``accept_prob`` is 1.0 or 0.0; ``uniform`` is None; ``rule_q`` is 1.0;
    ``target_prob`` is the softmax of the target's raw logits at the parent
    (temperature 1, no top-k or top-p), for information only: the rule ignores it.

    A rule an experiment hands the loop (one wrong on purpose) fills the same fields with what it did.
    """

    node: int  # tree index of the checked node
    parent: int  # tree index of its parent: the node the walk was at
    token: int
    depth: int  # draft position (1 = first drafted token)
    draft_prob: float  # the drafter's own probability of the token given its parent (DraftTree.probs)
    rule_q: float  # the draft probability q the rule tests against (1.0: a top-k point mass)
    target_prob: float  # p(token) under the distribution it was tested against (see above)
    accept_prob: float  # min(1, target_prob / rule_q): the chance the rule accepts it
    uniform: Optional[float]  # the draw u it was tested with; None at temperature 0
    accepted: bool


@dataclass
class Residual:
    """Where a sampling step's path broke, and the distribution its bonus token came from.

    At ``node`` (the last accepted node, or the root 0) the rule rejected every child
    it tried, or there were none; the bonus is drawn from the residual: the target's
    processed distribution there with the rejected children's tokens removed and the
    rest renormalised (for the exact rule; a wrong rule records its own). ``top`` holds
    the residual's most likely tokens, at most RESIDUAL_TOP of them and only those of
    positive mass, best first, as (token id, probability); ``covered`` is the mass they
    hold (1.0 when they are all of it). ``resampled_token`` is the bonus drawn."""

    node: int
    top: list[tuple[int, float]]
    covered: float
    resampled_token: int


RESIDUAL_TOP = 8  # tokens of the residual a step keeps (Residual.top)


@dataclass
class StepEvent:
    """One target forward (the prefill or a verify) and what it emitted."""

    step: int  # 0 = the prefill
    emitted: list[EmittedToken]  # accepted drafts then the bonus, cut at EOS / length / context
    # Drafted tokens accepted and written: the quantity acceptance is measured on. A step cut by
    # the token limit, an EOS or the context counts only the drafts it wrote (see cut_nodes).
    accepted_length: int
    rejected: list[RejectedToken]  # the drafted alternatives at the depth where acceptance stopped
    drafted: int  # nodes in the draft tree (root excluded)
    draft_s: float
    verify_s: float
    elapsed_s: float  # since the start of generation, at the end of this step
    tree: Optional[DraftTree] = None  # the full draft tree (for the walkthrough)
    accepted_nodes: list[int] = field(default_factory=list)  # tree indices of the accepted path, as written
    # Tree indices the target accepted after the last written token: cut by the token limit, an
    # EOS or the context, never written, so counted nowhere (empty but for a generation's last step).
    cut_nodes: list[int] = field(default_factory=list)
    target_choices: list[int] = field(default_factory=list)  # the target's token at each depth
    finished: bool = False
    finish_reason: Optional[str] = None  # "eos", "length", "context", "stopped"
    copy_nodes: int = 0  # of the drafted nodes, those the copy proposer added (gumiho.proposers.copying)
    # The draft positions d (1..accepted_length) of the written path whose node was copied
    # from the context.
    copied_positions: list[int] = field(default_factory=list)
    # Every drafted node the acceptance rule tested, in the order it tested them, with
    # its decision (NodeCheck), and, when sampling, the residual the bonus was drawn
    # from (Residual). Empty / None for the prefill. A step cut by the token limit, an
    # EOS or the context still lists every check the rule made: they describe the
    # rule's decisions, and accepted_length / cut_nodes say what was written.
    checks: list[NodeCheck] = field(default_factory=list)
    residual: Optional[Residual] = None

    @property
    def tokens(self) -> list[int]:
        return [e.token for e in self.emitted]

    @property
    def is_verify(self) -> bool:
        return self.step > 0
