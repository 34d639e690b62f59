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
node's own path, all paths at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .errors import GumihoError
from .heads import HeadFamily


@dataclass
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
    machine (gumiho.verifycost has the rule and its derivation)."""

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


def _ancestor_lists(parents: list[int]) -> list[list[int]]:
    """For each node, itself and its ancestors (root first). Parents come first, so
    a node's list is its parent's plus itself."""
    anc: list[list[int]] = []
    for i, p in enumerate(parents):
        anc.append(anc[p] + [i] if p >= 0 else [i])
    return anc


def ancestor_matrix(tree: DraftTree, device=None) -> torch.Tensor:
    """[T, T] bool: entry (i, j) is True iff j is i or an ancestor of i."""
    t = len(tree)
    flat = [i * t + j for i, a in enumerate(_ancestor_lists(tree.parents)) for j in a]
    m = torch.zeros(t * t, dtype=torch.bool)
    m[torch.tensor(flat, dtype=torch.long)] = True
    m = m.view(t, t)
    return m.to(device) if device is not None else m


def verify_inputs(tree: DraftTree, past_len: int, device, dtype):
    """Input ids [1,T], position ids [1,T] and the additive 4D attention mask
    [1,1,T,P+T] (0 where attention is allowed, a large negative value elsewhere) for
    one target forward over the whole tree after a cache of ``past_len`` tokens."""
    return tree_inputs(tree.tokens, tree.parents, tree.depths, past_len, device, dtype)


def tree_inputs(tokens: list[int], parents: list[int], depths: list[int], past_len: int, device, dtype):
    """:func:`verify_inputs` from the tree's lists (what a runtime is handed)."""
    t = len(tokens)
    width = past_len + t
    ids = torch.tensor([tokens], dtype=torch.long, device=device)
    pos = torch.tensor([[past_len + d for d in depths]], dtype=torch.long, device=device)
    # Every cached position is visible; of the tree, a node's ancestors and itself.
    flat = [i * width + past_len + j for i, a in enumerate(_ancestor_lists(parents)) for j in a]
    mask = torch.full((t, width), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :past_len] = 0
    mask.view(-1)[torch.tensor(flat, dtype=torch.long, device=device)] = 0
    return ids, pos, mask[None, None]


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
