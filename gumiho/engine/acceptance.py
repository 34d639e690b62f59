"""Acceptance: which drafted path the target keeps, and the token it adds itself.

Both rules walk the tree from the root. At each node the target's distribution
over the next token is known (one verify forward gave logits for every node).

Greedy (temperature 0): the target's next token is argmax p. If a child of the
current node carries that token, move to it and repeat; otherwise stop, and the
argmax is the bonus token. The emitted tokens are exactly what greedy decoding of
the target alone would emit.

Sampling (temperature > 0): the drafted children c1, c2, ... of a node are fixed
candidates (top-k of the drafter, not samples from it), so the multi-draft
rejection rule (SpecInfer / EAGLE) with a point-mass draft q = delta(c) reads:

    accept c_i with probability  p(c_i) / (1 - p(c_1) - ... - p(c_{i-1}))
    on rejection:                p <- normalise(max(p - q, 0)) = p with c_i zeroed
    all children rejected:       sample the bonus token from what is left of p

Unrolled, P(emit c_i) = p(c_i) and P(emit y) = p(y) for any other y: the emitted
token has exactly the target's distribution, whatever the drafter proposed.

When asked (``records=True``: the walkthrough and the lab ask), both rules also
record what they did, for the events (gumiho.engine.events): every node tested, in
order, with the numbers of its test (NodeCheck), and, when sampling, the residual
distribution the bonus was drawn from (Residual). Recording draws nothing from the
generator, so the samples, and the tokens, are the same with records on or off. Off,
greedy reads the device once per step (the argmax of every row) and sampling once
(the processed distribution, copied to the host before the walk); the records add a
log-softmax of each visited row and a second read (greedy), and a float per child
and a top-k of the residual (sampling).

A rule is a callable handed to the decode loop (gumiho.engine.decode.stream's
``acceptance_rule``), called as :data:`SamplingRule` says. The engine has two:
:func:`accept_greedy` for temperature 0 and :func:`accept_sampling` above it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..tree import DraftTree
from .events import RESIDUAL_TOP, NodeCheck, Residual


@dataclass
class Acceptance:
    path: list[int]  # accepted node indices, root excluded, in order
    bonus: int  # the target's own next token after the accepted path
    target_choices: list[int]  # the target's token at each depth (accepted tokens, then the bonus)
    # Every node the rule tested, in order, with its decision; and (sampling) the
    # distribution the bonus was drawn from where the path broke (gumiho.engine.events).
    checks: list[NodeCheck] = field(default_factory=list)
    residual: Optional[Residual] = None


def process_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """Target distribution for sampling: temperature, then top-k, then top-p
    (nucleus), as HF generate applies them. logits [..., V] -> probabilities."""
    logits = logits.float() / temperature
    if top_k and top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p (keep at least one).
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= top_p
        drop_sorted[..., 0] = False
        drop = drop_sorted.scatter(-1, idx, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def accept_greedy(tree: DraftTree, logits: torch.Tensor, children: list[list[int]] | None = None,
                  records: bool = False) -> Acceptance:
    """logits [T, V]: the target's logits at every tree node. ``children``:
    ``tree.children()`` when the caller already has it. ``records``: fill
    Acceptance.checks (one more read of the device)."""
    choice = logits.argmax(-1).tolist()
    if children is None:
        children = tree.children()
    node, path, chosen = 0, [], []
    tried: list[tuple[int, int]] = []  # (parent, child) in the order the rule compared them with the argmax
    while True:
        y = choice[node]
        chosen.append(y)
        nxt = None
        for c in children[node]:
            tried.append((node, c))
            if tree.tokens[c] == y:
                nxt = c
                break
        if nxt is None:
            return Acceptance(path, y, chosen, _greedy_checks(tree, logits, tried, choice) if records else [])
        path.append(nxt)
        node = nxt


def _greedy_checks(tree: DraftTree, logits: torch.Tensor, tried: list[tuple[int, int]],
                   choice: list[int]) -> list[NodeCheck]:
    """The greedy rule's checks. Each one's target_prob (the softmax of the raw logits,
    for information: greedy compares tokens only) comes from a log-softmax of the rows
    the walk visited only, not the whole tree, read back in one transfer."""
    if not tried:
        return []
    picked, tokens = [], []
    for k, (parent, c) in enumerate(tried):  # tried is grouped by parent, in walk order
        tokens.append(tree.tokens[c])
        if k + 1 == len(tried) or tried[k + 1][0] != parent:
            row = torch.log_softmax(logits[parent].float(), dim=-1)
            picked.append(row[torch.tensor(tokens, device=row.device)])
            tokens = []
    target_probs = torch.cat(picked).exp().tolist()
    checks = []
    for (parent, c), tp in zip(tried, target_probs):
        hit = tree.tokens[c] == choice[parent]
        checks.append(NodeCheck(node=c, parent=parent, token=tree.tokens[c], depth=tree.depths[c],
                                draft_prob=tree.probs[c], rule_q=1.0, target_prob=tp,
                                accept_prob=1.0 if hit else 0.0, uniform=None, accepted=hit))
    return checks


def sampled_check(tree: DraftTree, node: int, parent: int, rule_q: float, target_prob: float,
                  uniform: float, accepted: bool) -> NodeCheck:
    """The record of one sampled test: accept_prob = min(1, target_prob / rule_q), kept
    consistent with the decision the rule actually made, so that ``accepted`` is
    exactly ``uniform < accept_prob`` (see NodeCheck: the two can differ only by the
    rounding of the quotient, when the draw lands on the boundary)."""
    if rule_q > 0:
        accept_prob = min(1.0, target_prob / rule_q)
    else:  # q = 0 where p > 0: the ratio is infinite, the rule accepts
        accept_prob = 1.0 if target_prob > 0 else 0.0
    if accepted and not uniform < accept_prob:
        accept_prob = math.nextafter(uniform, math.inf)
    elif not accepted and uniform < accept_prob:
        accept_prob = uniform
    return NodeCheck(node=node, parent=parent, token=tree.tokens[node], depth=tree.depths[node],
                     draft_prob=tree.probs[node], rule_q=rule_q, target_prob=target_prob,
                     accept_prob=accept_prob, uniform=uniform, accepted=accepted)


def residual_record(node: int, residual: torch.Tensor, token: int) -> Residual:
    """The residual distribution ``residual`` [V] (normalised) at ``node``, as its top
    tokens of positive mass, and the bonus ``token`` drawn from it: one top-k."""
    values, ids = torch.topk(residual, min(RESIDUAL_TOP, residual.shape[-1]))
    top = [(int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist()) if v > 0]
    return Residual(node=node, top=top, covered=sum(v for _, v in top), resampled_token=token)


def accept_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator | None,
                    children: list[list[int]] | None = None, records: bool = False) -> Acceptance:
    """The engine's sampling rule (see the module's docstring for its math). probs [T, V]:
    the target's processed distribution at every tree node, on the host. ``children``:
    ``tree.children()`` when the caller already has it. ``records``: fill
    Acceptance.checks and Acceptance.residual."""
    if children is None:
        children = tree.children()
    node, path, chosen, checks = 0, [], [], []
    while True:
        p = probs[node].clone()
        moved = False
        for c in children[node]:
            tok = tree.tokens[c]
            mass = float(p.sum())
            r = float(torch.rand((), generator=generator))
            p_tok = float(p[tok])
            # Accept with probability p(c) / mass. In the engine r, mass and p(c) are float32
            # values, so the product r * mass is exact in double precision: this is the
            # exact test r < p(c) / mass, free of the quotient's rounding.
            ok = mass > 0 and r * mass < p_tok
            if records:
                checks.append(sampled_check(tree, c, node, 1.0, p_tok / mass if mass > 0 else 0.0, r, ok))
            if ok:
                chosen.append(tok)
                path.append(c)
                node, moved = c, True
                break
            p[tok] = 0.0  # rejected: residual max(p - q, 0) with q a point mass on c
        if not moved:
            if float(p.sum()) <= 0:  # every token of p was a rejected child: cannot happen exactly
                p = probs[node]
            residual = p / p.sum()
            y = int(torch.multinomial(residual, 1, generator=generator))
            chosen.append(y)
            return Acceptance(path, y, chosen, checks, residual_record(node, residual, y) if records else None)


# How the decode loop calls a sampling rule:
#     rule(tree, probs, generator, children=children, records=records) -> Acceptance
# probs [T, V] the target's processed distribution at every node, on the host; the rule
# draws from ``generator`` only (so a seed replays it) and fills the records only when
# ``records`` is true. The engine's own is accept_sampling; an experiment may hand the
# loop another (one that is wrong on purpose, to see the losslessness test catch it).
SamplingRule = Callable[..., Acceptance]


def sample_token(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))
