"""Choosing the nodes of a draft tree, for the proposers: the best nodes of a candidate
pool under a budget (closed under ancestors), a tree built from them, a chain added to a
tree, and the best part of a tree kept. The tree itself is gumiho.tree."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..heads import HeadFamily
from ..tree import DraftTree


def select_nodes(scores: list[float], parents: list[int], budget: int) -> list[int]:
    """The ``budget`` candidate nodes with the highest cumulative log-probability,
    closed under ancestors, in index (parents-first) order.

    A child's cumulative log-probability is never above its parent's (log p <= 0),
    so the best nodes are almost always ancestor-closed already; ties (p == 1 in
    float) are broken by index, which puts parents first, and any missing ancestor
    is added explicitly rather than trusted."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    chosen: set[int] = set()
    for i in order:
        if len(chosen) >= budget:
            break
        chain = []
        j = i
        while j >= 0 and j not in chosen:
            chain.append(j)
            j = parents[j]
        if len(chosen) + len(chain) > budget:
            continue
        chosen.update(chain)
    return sorted(chosen)




@dataclass
class CandidatePool:
    """A step's drafted candidates, before the tree is chosen from them: per
    candidate its token, parent (an index of the pool; -1 = a child of the root),
    depth, draft probability and score (log path probability). Python lists: a
    drafter fills a whole depth at a time from one read of the device."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __len__(self):
        return len(self.tokens)


def tree_from_candidates(root_token: int, pool: CandidatePool, keep: list[int],
                         head_at: Callable[[int], HeadFamily], extension: Optional[list] = None) -> DraftTree:
    """The DraftTree of the pool's candidates ``keep`` (ascending, closed under
    ancestors: ``select_nodes``), each recorded with ``head_at(depth)``, the head
    family that drafts that depth. ``extension`` optionally lists extra (pool
    index of a leaf, [(token, prob), ...]) chains appended below chosen leaves
    (the full tree)."""
    new_index = {old: k + 1 for k, old in enumerate(keep)}
    tree = DraftTree.root_only(root_token)
    for old in keep:
        p = pool.parents[old]
        tree.add(pool.tokens[old], 0 if p < 0 else new_index[p], pool.probs[old], pool.scores[old],
                 head_at(int(pool.depths[old])))
    if extension:
        has_children = set(tree.parents)
        chains = []
        for leaf, chain in extension:
            node = new_index.get(leaf)
            if node is None or node in has_children:
                continue  # not a leaf of the chosen tree
            chains.append((node, chain))
            if chain:
                has_children.add(node)
        # Log-probabilities of every chain node at once (float32, as the drafter's own).
        probs = [float(prob) for _, chain in chains for _, prob in chain]
        logs = torch.log(torch.tensor([max(p, 1e-30) for p in probs], dtype=torch.float32)).tolist() if probs else []
        n = 0
        for parent, chain in chains:
            for tok, _ in chain:
                parent = tree.add(tok, parent, probs[n], tree.scores[parent] + logs[n],
                                  head_at(tree.depths[parent] + 1), full_tree=True)
                n += 1
    return tree


def add_chain(tree: DraftTree, chain: list[int], max_depth: Optional[int] = None,
              copy_prob: float = 0.0) -> DraftTree:
    """``tree`` with the candidate path ``chain`` (tokens following the root) merged
    in, as the copy proposer's guess is (gumiho.proposers.copying): from the root down, while
    the next token of ``chain`` is already a child of the current node, the chain
    follows that node (it costs nothing: the node is verified anyway, and stays the
    drafter's); from the first token that is not, the rest hangs below as new
    nodes, marked ``copied``. No new node is deeper than ``max_depth``.

    New nodes carry the draft probability ``copy_prob`` (the copy proposer's own
    estimate of how often such a node is accepted; it orders a node's children for
    the sampling verifier, and any order keeps sampling exact) and a score, the log
    of their path probability, that continues their parent's."""
    if not chain:
        return tree
    out = DraftTree(list(tree.tokens), list(tree.parents), list(tree.depths), list(tree.probs),
                    list(tree.scores), list(tree.heads), list(tree.full_tree), list(tree.copied))
    children: dict[tuple[int, int], int] = {}
    for i in range(1, len(out)):
        children.setdefault((out.parents[i], out.tokens[i]), i)
    node = 0
    for tok in chain:
        tok = int(tok)
        nxt = children.get((node, tok))
        if nxt is None:
            if max_depth is not None and out.depths[node] + 1 > max_depth:
                break
            nxt = out.add(tok, node, copy_prob, out.scores[node] + (math.log(copy_prob) if copy_prob > 0 else -1e9),
                          HeadFamily.COPY, copied=True)
            children[(node, tok)] = nxt
        node = nxt
    return out


def keep_best(tree: DraftTree, budget: int, keep_above: float = 1.0) -> DraftTree:
    """``tree`` cut to its ``budget`` most probable drafted nodes (by ``scores``, the
    log path probabilities), closed under ancestors, and, beyond the budget, every
    copied node whose path probability is at least ``keep_above`` (with its
    ancestors; 1 or more: none). The order of the kept nodes, and so parents-first,
    is kept."""
    n = len(tree)
    scores = tree.scores
    forced: set[int] = set()
    threshold = (math.inf if keep_above >= 1 else math.log(keep_above) if keep_above > 0 else -math.inf)
    for i in range(1, n):
        if tree.copied[i] and scores[i] >= threshold:
            j = i
            while j > 0 and j not in forced:
                forced.add(j)
                j = tree.parents[j]
    # The rest by select_nodes over the pool of drafted nodes (pool parents: -1 = the root).
    pool = [i for i in range(1, n) if i not in forced]
    if len(pool) + len(forced) <= budget + sum(tree.copied[i] for i in forced):
        return tree
    room = max(budget - sum(not tree.copied[i] for i in forced), 0)
    # A pool node whose parent is forced hangs from a kept node: it counts as a root child.
    pos = {old: k for k, old in enumerate(pool)}
    chosen = select_nodes([scores[i] for i in pool],
                          [pos.get(tree.parents[i], -1) for i in pool], room)
    keep = sorted(forced | {pool[k] for k in chosen})
    return subtree(tree, keep)


def subtree(tree: DraftTree, keep: list[int]) -> DraftTree:
    """The root and the nodes ``keep`` (ascending, closed under ancestors), re-indexed."""
    new = {0: 0}
    out = DraftTree.root_only(tree.tokens[0])
    for i in keep:
        new[i] = out.add(tree.tokens[i], new[tree.parents[i]], tree.probs[i], tree.scores[i], tree.heads[i],
                         full_tree=tree.full_tree[i], copied=tree.copied[i])
    return out
