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
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .tree import DraftTree


@dataclass
class Acceptance:
    path: list[int]  # accepted node indices, root excluded, in order
    bonus: int  # the target's own next token after the accepted path
    target_choices: list[int]  # the target's token at each depth (accepted tokens, then the bonus)


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


def accept_greedy(tree: DraftTree, logits: torch.Tensor, children: list[list[int]] | None = None) -> Acceptance:
    """logits [T, V]: the target's logits at every tree node. ``children``:
    ``tree.children()`` when the caller already has it."""
    choice = logits.argmax(-1).tolist()
    if children is None:
        children = tree.children()
    node, path, chosen = 0, [], []
    while True:
        y = choice[node]
        chosen.append(y)
        nxt = next((c for c in children[node] if tree.tokens[c] == y), None)
        if nxt is None:
            return Acceptance(path, y, chosen)
        path.append(nxt)
        node = nxt


def accept_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator | None,
                    children: list[list[int]] | None = None) -> Acceptance:
    """probs [T, V]: the target's processed distribution at every tree node. ``children``:
    ``tree.children()`` when the caller already has it."""
    if children is None:
        children = tree.children()
    node, path, chosen = 0, [], []
    while True:
        p = probs[node].clone()
        moved = False
        for c in children[node]:
            tok = tree.tokens[c]
            mass = float(p.sum())
            r = float(torch.rand((), generator=generator))
            if mass > 0 and r * mass < float(p[tok]):  # accept with probability p(c) / mass
                chosen.append(tok)
                path.append(c)
                node, moved = c, True
                break
            p[tok] = 0.0  # rejected: residual max(p - q, 0) with q a point mass on c
        if not moved:
            if float(p.sum()) <= 0:  # every token of p was a rejected child: cannot happen exactly
                p = probs[node]
            y = int(torch.multinomial(p / p.sum(), 1, generator=generator))
            chosen.append(y)
            return Acceptance(path, y, chosen)


def sample_token(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))
