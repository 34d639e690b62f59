"""The draft tree: what the drafter proposes and the target verifies in one forward.

Node 0 is the root: the last token already emitted but not yet seen by the target.
Every other node is a drafted token; its parent is the node it continues. A path
from the root is one candidate continuation. Nodes are stored parents-first, so a
node's index is always larger than its parent's.

For the verify forward the tree is flattened into a sequence of T = len(tree)
tokens appended after the target's KV cache of length P:

* position id of node i  = P + depth(i)     (a node sits where it would in its own path)
* node i may attend to   every cached position, and to node j iff j is i or an
                         ancestor of i      (it must not see its siblings or cousins)

which makes each node's logits exactly those the target would compute for that
node's own path, all paths at once (the torch runtime's inputs: gumiho.runtimes.treemask;
choosing a tree's nodes: gumiho.proposers.selection).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .errors import GumihoError
from .heads import HeadFamily


# slots: a misspelt or renamed field set on an instance (tree.top_k = 10) raises
# instead of becoming a stray attribute that nothing reads.
@dataclass(slots=True)
class TreeSettings:
    """How big a tree to draft. ``total_tokens`` counts drafted nodes (the root is
    extra); ``depth`` caps the path length; ``serial_top_k`` is the branching of the
    serial steps (not the sampling top-k of GenerationSettings); the MLP depths keep the best ``mlp_keep`` paths, each extended by its
    ``mlp_top_k`` best tokens. ``full_tree`` (the paper's Full Tree Attention idea,
    made exact here): paths that stop short of the full depth are extended by the MLP
    heads' top-1 guesses for the remaining positions, which costs no drafting at all,
    with up to ``full_tree_tokens`` extra nodes.

    ``cost_aware``: ``total_tokens`` becomes the most a step verifies; each step
    verifies only as many of its best nodes as pay for themselves, from the drafter's
    path probabilities and the target's verify cost per tree size measured on this
    machine (gumiho.engine.verifycost has the rule and its derivation)."""

    total_tokens: int = 20
    depth: int = 6
    serial_top_k: int = 4
    mlp_top_k: int = 2
    mlp_keep: int = 6
    full_tree: bool = True
    full_tree_tokens: int = 4
    cost_aware: bool = False

    def validate(self):
        for name in ("total_tokens", "depth", "serial_top_k", "mlp_top_k", "mlp_keep"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise GumihoError(f"Tree setting {name} must be a whole number >= 1, got {v!r}.")
        if self.total_tokens > 512:
            raise GumihoError(f"Tree setting total_tokens={self.total_tokens} is too large; use at most 512.")
        if not isinstance(self.full_tree_tokens, int) or self.full_tree_tokens < 0:
            raise GumihoError("Tree setting full_tree_tokens must be a whole number >= 0.")
        for name in ("full_tree", "cost_aware"):
            if not isinstance(getattr(self, name), bool):
                raise GumihoError(f"Tree setting {name} must be True or False, got {getattr(self, name)!r}.")
        return self

    @classmethod
    def for_device(cls, device) -> "TreeSettings":
        """Trees sized for the device. A verify forward over k tokens costs little more
        than over one token on a GPU, but grows quickly on a CPU, so CPU trees are small."""
        if torch.device(device).type == "cuda":
            # The paper's node budget and depth, with a smaller MLP branching so drafting stays cheap.
            return cls(total_tokens=63, depth=7, serial_top_k=10, mlp_top_k=5, mlp_keep=35, full_tree=True, full_tree_tokens=8)
        # CPU: chosen with research/tune_tree.py (shipped SmolLM2 drafter, 2 cores) and
        # research/profile_step.py --verify-sizes. The target's packed float32 products
        # take rows in blocks of about six on an AVX-512 CPU: a verify forward over 3-6
        # tokens costs no more than a one-token forward, over 7-12 tokens some 10% more.
        # So the tree is 6 nodes, root included: 5 drafted, four first-position
        # candidates. The drafter's acceptance beyond position 3 is near zero at this
        # budget, so the tree stops at depth 3 and runs one MLP head, not three; and
        # the full-tree node is left out, because at a fixed budget a base-tree node is
        # accepted more often. A stronger drafter wants a larger tree.
        #
        # A cost-aware tree (cost_aware=True, total_tokens as its cap) sizes each step
        # from the verify cost measured on the machine instead. On this CPU, and with its
        # kernels capped at AVX2, it settled on about the same size at the same speed
        # (benchmarks/notes.md), so the default stays fixed: the same trees on every
        # run and machine, and tau that does not depend on a timing.
        return cls(total_tokens=5, depth=3, serial_top_k=4, mlp_top_k=2, mlp_keep=3, full_tree=False, full_tree_tokens=0)

    @classmethod
    def for_target(cls, target) -> "TreeSettings":
        """The tree the target's runtime wants (Runtime.default_tree): :meth:`for_device`
        where a verify over a few tokens costs about one forward; the llama.cpp
        runtime's own where it does not (gumiho.runtimes.llamacpp)."""
        return target.runtime.default_tree(target.device)



@dataclass
class DraftTree:
    """One struct of arrays, one entry per node in every list (node 0 the root).
    Build one with :meth:`root_only` and :meth:`add`, or :meth:`of` from tokens and
    parents; every builder records who proposed each node."""

    tokens: list[int]  # token id per node
    parents: list[int]  # parent index per node; -1 for the root
    depths: list[int]  # 0 for the root
    probs: list[float]  # drafter's conditional probability of the node given its parent; 1 for the root
    scores: list[float]  # cumulative log-probability along the path; 0 for the root
    # Who proposed each node: the target (the root), a serial step, an MLP head, or
    # the context (copied); with the node's depth it names the very step or head.
    heads: list[HeadFamily]
    full_tree: list[bool]  # node added by the full-tree extension
    copied: list[bool]  # node added by the copy proposer (gumiho.proposers.copying)

    def __len__(self):
        return len(self.tokens)

    @classmethod
    def root_only(cls, token: int) -> "DraftTree":
        return cls([token], [-1], [0], [1.0], [0.0], [HeadFamily.TARGET], [False], [False])

    @classmethod
    def of(cls, tokens: list[int], parents: list[int], probs: Optional[list[float]] = None,
           heads: Optional[list[HeadFamily]] = None) -> "DraftTree":
        """A tree from its tokens and parents (parents first; the root's is -1), as a
        test or an example writes one: depths and scores follow from the parents and
        ``probs`` (default 1 each); ``heads`` default to a serial step for every
        drafted node."""
        tree = cls.root_only(tokens[0])
        for i in range(1, len(tokens)):
            p = 1.0 if probs is None else float(probs[i])
            tree.add(tokens[i], parents[i], p, tree.scores[parents[i]] + math.log(max(p, 1e-30)),
                     HeadFamily.SERIAL if heads is None else heads[i])
        return tree

    def add(self, token: int, parent: int, prob: float, score: float, head: HeadFamily,
            full_tree: bool = False, copied: bool = False) -> int:
        """Append a node below ``parent``; returns its index."""
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.probs.append(float(prob))
        self.scores.append(float(score))
        self.heads.append(HeadFamily(head))
        self.full_tree.append(bool(full_tree))
        self.copied.append(bool(copied))
        return len(self.tokens) - 1

    def children(self) -> list[list[int]]:
        """Children of each node, best draft probability first (the order in which
        the sampling verifier tries them)."""
        out: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents):
            if p >= 0:
                out[p].append(i)
        for ch in out:
            ch.sort(key=lambda i: -self.probs[i])
        return out

    def path_to(self, node: int) -> list[int]:
        """Node indices from the first drafted node down to ``node`` (root excluded)."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def check(self):
        n = len(self.tokens)
        sizes = {name: len(getattr(self, name)) for name in
                 ("parents", "depths", "probs", "scores", "heads", "full_tree", "copied")}
        if any(size != n for size in sizes.values()):
            raise GumihoError(f"Malformed draft tree: {n} tokens, but per-node lists of sizes {sizes}.")
        for i, p in enumerate(self.parents):
            if i == 0:
                if p != -1 or self.depths[0] != 0:
                    raise GumihoError("Malformed draft tree: node 0 must be the root.")
            elif not (0 <= p < i) or self.depths[i] != self.depths[p] + 1:
                raise GumihoError(f"Malformed draft tree at node {i}.")
        return self
