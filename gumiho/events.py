"""What one decoding step produced. Vanilla and speculative decoding emit the same
event type, so the UI, the metrics and the benchmark treat both the same way."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .heads import HeadFamily
from .tree import DraftTree


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

    @property
    def tokens(self) -> list[int]:
        return [e.token for e in self.emitted]

    @property
    def is_verify(self) -> bool:
        return self.step > 0
