"""Acceptance rules by name, for the losslessness experiment (gumiho.lab.lossless).

"exact" is the engine's rule (gumiho.engine.acceptance.accept_sampling): with it,
speculative sampling emits exactly the target's distribution. The other two live
here, in the lab, not in the engine: they are wrong on purpose, so that the
experiment can be seen to fail when the rule is wrong. The lab hands the decode
loop a rule as a callable (``stream(..., acceptance_rule=SAMPLING_RULES[name])``);
the engine knows none of them by name:

* "keep_drafts" keeps every drafted token: at each node it moves to the best child
  (the first of ``DraftTree.children()``) as long as there is one, and samples the
  bonus from the target's p at the end. The drafter, not the target, then picks
  the first tokens: P(emit c_1) = 1 whatever p(c_1) is.

* "drafter_q" is the classic rule for drafts *sampled* from the drafter's
  distribution q, applied to drafts that were not sampled but picked top-k: accept
  child c with probability min(1, p(c) / q(c)), q(c) the drafter's own probability
  of c (DraftTree.probs), and on a rejection p <- normalise(max(p - q, 0)), with q
  the drafter's distribution restricted to the drafted siblings (q(c) for each
  drafted child, 0 elsewhere). The rule is right only when c was a draw from q:
  then P(propose c and accept it) = q(c) min(1, p(c)/q(c)) = min(q(c), p(c)). A top-k
  child is proposed with probability 1, so P(emit c) = min(1, p(c)/q(c)), which is
  not p(c) unless q(c) = 1: a child the drafter gave q = 0.3 and the target p = 0.3
  is kept every time instead of three times in ten.

Asked to (``records=True``), each rule fills the same records as the exact one
(gumiho.engine.events: NodeCheck, Residual) with what it did; it draws like it: one uniform per child tested, then
one multinomial for the bonus. All three are sampling rules (temperature > 0);
greedy decoding has its own rule and takes no other.
"""
from __future__ import annotations

import torch

from ..engine.acceptance import Acceptance, SamplingRule, accept_sampling, residual_record, sampled_check
from ..engine.events import NodeCheck
from ..errors import GumihoError
from ..tree import DraftTree

EXACT = "exact"


def accept_keep_drafts(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator | None,
                       children: list[list[int]] | None = None, records: bool = False) -> Acceptance:
    """WRONG on purpose: keep the best child at every depth, then the bonus from p."""
    if children is None:
        children = tree.children()
    node, path, chosen, checks = 0, [], [], []
    while children[node]:
        c = children[node][0]
        tok = tree.tokens[c]
        # Drawn like the exact rule's test so the record reads the same way; with
        # accept_prob 1 every draw (u < 1) accepts: the rule ignores p.
        r = float(torch.rand((), generator=generator))
        if records:
            p = probs[node]
            mass = float(p.sum())
            checks.append(NodeCheck(node=c, parent=node, token=tok, depth=tree.depths[c], draft_prob=tree.probs[c],
                                    rule_q=1.0, target_prob=float(p[tok]) / mass if mass > 0 else 0.0,
                                    accept_prob=1.0, uniform=r, accepted=True))
        path.append(c)
        chosen.append(tok)
        node = c
    residual = probs[node] / probs[node].sum()
    y = int(torch.multinomial(residual, 1, generator=generator))
    chosen.append(y)
    return Acceptance(path, y, chosen, checks, residual_record(node, residual, y) if records else None)


def accept_drafter_q(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator | None,
                     children: list[list[int]] | None = None, records: bool = False) -> Acceptance:
    """WRONG on purpose: the sampled-draft rule min(1, p/q) with the drafter's own q,
    on drafts that were picked top-k (see the module's docstring)."""
    if children is None:
        children = tree.children()
    node, path, chosen, checks = 0, [], [], []
    while True:
        p = probs[node] / probs[node].sum()  # the distribution the next child is tested against
        q = torch.zeros_like(p)
        for c in children[node]:
            q[tree.tokens[c]] = tree.probs[c]
        moved = False
        for c in children[node]:
            tok, qc = tree.tokens[c], float(tree.probs[c])
            r = float(torch.rand((), generator=generator))
            tp = float(p[tok])
            accept_prob = min(1.0, tp / qc) if qc > 0 else (1.0 if tp > 0 else 0.0)
            ok = r < accept_prob
            if records:
                checks.append(sampled_check(tree, c, node, qc, tp, r, ok))
            if ok:
                chosen.append(tok)
                path.append(c)
                node, moved = c, True
                break
            rest = torch.clamp(p - q, min=0)
            if float(rest.sum()) > 0:  # p <= q everywhere leaves nothing: keep p (the rule has no answer)
                p = rest / rest.sum()
        if not moved:
            y = int(torch.multinomial(p, 1, generator=generator))
            chosen.append(y)
            return Acceptance(path, y, chosen, checks, residual_record(node, p, y))


# The rules by name, each the callable the decode loop takes as ``acceptance_rule``
# (gumiho.engine.decode.stream); the names are the experiment's and the app's.
SAMPLING_RULES: dict[str, SamplingRule] = {
    EXACT: accept_sampling,
    "keep_drafts": accept_keep_drafts,
    "drafter_q": accept_drafter_q,
}

RULE_DESCRIPTIONS = {
    EXACT: "the engine's rule: accept child c with probability p(c) / (mass left), "
           "remove a rejected child from p, draw the bonus from what is left",
    "keep_drafts": "wrong on purpose: keep the best drafted child at every depth, whatever the target says",
    "drafter_q": "wrong on purpose: accept c with probability min(1, p(c) / q(c)) using the drafter's own "
                 "probability q(c), as if the top-k drafts had been sampled from q",
}

# Each rule as a sentence names it, for verdicts read by people rather than code.
RULE_NAMES = {
    EXACT: "the engine's acceptance rule",
    "keep_drafts": "the wrong rule that keeps every drafted token",
    "drafter_q": "the wrong rule min(1, p/q) with the drafter's own q",
}
assert set(RULE_NAMES) == set(RULE_DESCRIPTIONS) == set(SAMPLING_RULES)


def check_rule(name) -> str:
    """``name`` when it names a rule; else a GumihoError listing the names."""
    if not isinstance(name, str) or name not in SAMPLING_RULES:
        raise GumihoError(f"Unknown acceptance rule {str(name)[:40]!r}; the rules are "
                          f"{', '.join(SAMPLING_RULES)}.")
    return name
