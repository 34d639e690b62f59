"""The learned drafter as a proposer: its own KV cache over the accepted context,
and the dynamic top-k expansion that turns its guesses into a DraftTree.

The drafter's context is always built from the target's real states of the accepted
tokens (never from its own guesses), so a rejected draft leaves no trace.

A step drafts in three parts (``DraftSession.propose``):

    serial beam   depths 1..S: a beam of ``serial_top_k`` paths; the serial
                  Transformer runs once per depth on the whole beam, every node
                  attending to the context and to its own ancestors
    MLP beam      depths S+1..: every beam path at depth S feeds the MLP heads once,
                  all heads at once; the per-depth beam of ``mlp_keep`` paths reads
                  each head's distribution for its own serial ancestor (the heads'
                  guesses do not depend on the tokens chosen at the MLP depths before
                  them: that is what makes them parallel)
    selection     the ``total_tokens`` most probable candidates, closed under
                  ancestors (gumiho.tree.select_nodes), cut further to what pays for
                  its verify cost on a cost-aware tree, plus the full-tree chains
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from ..drafter import Drafter, GrowingKV, causal_mask
from ..engine.verifycost import best_node_count
from ..tree import DraftTree, TreeSettings
from .base import MLP, SERIAL, Budget, Head, Proposer, ProposerSession, Verified
from .selection import CandidatePool, select_nodes, tree_from_candidates


class LearnedProposer(Proposer):
    """A trained (or random-weight) drafter of any kind (gumiho.drafter): serial
    positions from its Transformer, later ones from its MLP heads."""

    sizes_by_cost = True

    def __init__(self, drafter: Drafter):
        self.drafter = drafter

    @property
    def cfg(self):
        return self.drafter.cfg

    @property
    def name(self) -> str:
        return self.cfg.kind

    @property
    def feature_layers(self) -> Optional[tuple]:
        return self.cfg.feature_layers

    @property
    def heads(self) -> tuple[Head, ...]:
        s, depth = self.cfg.serial_positions, self.cfg.max_depth
        out = []
        if s:
            out.append(Head(SERIAL, tuple(range(1, s + 1)), kind=self.cfg.kind))
        if depth > s:
            out.append(Head(MLP, tuple(range(s + 1, depth + 1)), kind=self.cfg.kind))
        return tuple(out)

    @property
    def max_depth(self) -> int:
        return self.cfg.max_depth

    def family_at(self, depth: int) -> str:
        return self.cfg.head_kind(depth)

    def start(self, prompt_ids: Sequence[int]) -> "DraftSession":
        return DraftSession(self.drafter, prompt_ids)

    def __repr__(self):
        return f"LearnedProposer({self.cfg.kind})"


@dataclass
class _MLPChains:
    """What the full-tree extension needs of the MLP beam: the heads' roots (pool
    index, score) and their top tokens and probabilities [R][n_mlp][k]."""

    roots: list
    top_tok: list
    top_p: list
    serial: int
    n_mlp: int


class DraftSession(ProposerSession):
    """One generation's drafting state. ``extend`` feeds accepted context (``update``
    does, from what the target verified); ``propose`` drafts a tree below the current
    root token."""

    def __init__(self, drafter: Drafter, context: Sequence[int] = ()):
        # The drafter drafts as it was given: gumiho.loading prepares the drafters it
        # loads once, at load (their CPU weights pre-packed: gumiho.loading.drafter).
        self.drafter = drafter
        self.cfg = drafter.cfg
        self.context = [int(t) for t in context]  # the prompt, then every token the target settled
        self._kv: list[GrowingKV] | None = None  # per layer, k/v over the accepted context
        self.length = 0  # context positions processed
        self.last_out = None  # drafter output at the last context position: its guess of the next hidden state
        self.last_input = None  # fc input at the last context position, u_{n-1}

    @property
    def kv(self):
        """Per layer (k, v) [1, nkv, L, hd] over the accepted context (views), or None."""
        return None if self._kv is None else [g.context() for g in self._kv]

    def update(self, verified: Verified) -> None:
        """The drafter reads pairs (state at i, token i+1): row i of the states goes
        with the token that followed it, the last rows' tokens of the context."""
        self.context += verified.tokens
        states = verified.states
        nxt = torch.tensor(self.context[len(self.context) - states.shape[0]:], device=states.device)
        self.extend(states, nxt)

    @torch.no_grad()
    def extend(self, states: torch.Tensor, next_ids: torch.Tensor):
        """Add positions whose target states are ``states`` and whose following tokens
        are ``next_ids`` [T] (pairs (h_i, x_{i+1})). ``states`` is what the target's
        forward hands over for the drafter's ``feature_layers`` (Target.forward): the
        final-norm hidden states [T, H], or a fused drafter's layers [T, k*H]."""
        d = self.drafter
        u = d.project_context(states[None], next_ids[None].to(states.device))  # [1, T, H]
        self.last_input = u[0, -1]
        if self.cfg.num_layers == 0 or self.cfg.serial_positions == 0:
            self.length += u.shape[1]
            return
        t = u.shape[1]
        pos = torch.arange(self.length, self.length + t, device=u.device)[None]
        if self._kv is None:
            self._kv = [GrowingKV() for _ in range(self.cfg.num_layers)]
        for g in self._kv:
            g.rewind()  # drop the last draft tree's rows
        out, _ = d.transformer(u, pos, causal_mask(t, self.length, u.device), self._kv)
        for g in self._kv:
            g.commit()
        self.length += t
        self.last_out = out[0, -1]

    @torch.no_grad()
    def propose(self, root_token: int, budget: Budget) -> DraftTree:
        """Draft a tree below ``root_token`` (the last emitted token): the serial
        beam, the MLP beam, then the selection (see the module docstring). With
        ``budget.verify_cost`` (a cost-aware tree), keep only as many of the best
        nodes as pay for the verify forward they make longer (gumiho.engine.verifycost)."""
        settings, cfg = budget.tree, self.cfg
        depth_cap = min(settings.depth, cfg.max_depth)
        if budget.max_depth is not None:
            depth_cap = min(depth_cap, budget.max_depth)
        if depth_cap < 1 or self.last_input is None:
            return DraftTree.root_only(root_token)
        pool = CandidatePool()
        S = min(cfg.serial_positions, depth_cap)
        if S >= 1:
            beam, parent_out, u_parent = self._serial_beam(pool, S, settings)
            head_in, mlp_roots = self._mlp_inputs(pool, beam, parent_out, u_parent, S, depth_cap)
        else:
            head_in = self.last_input[None]  # all-parallel: heads read the root's input
            mlp_roots = [(-1, 0.0)]
        chains = None
        if head_in is not None and mlp_roots:
            chains = self._mlp_beam(pool, head_in, mlp_roots, S, depth_cap, settings)
        return self._select(root_token, pool, settings, budget, chains)

    def _serial_beam(self, pool: CandidatePool, S: int, settings: TreeSettings):
        """Depths 1..S into ``pool``. Returns the final beam (pool indices), the
        drafter output each beam path was drawn from [B, H] and its parent's fc
        input [B, H] (what the MLP heads read)."""
        d, k = self.drafter, settings.serial_top_k
        vocab, dev = d.draft_vocab_ids, self.last_input.device
        logp = F.log_softmax(d.draft_logits(self.last_out).float(), -1)
        top = torch.topk(logp, min(k, logp.numel()))
        n1 = top.values.numel()
        pool.tokens += vocab[top.indices].tolist()
        pool.parents += [-1] * n1
        pool.depths += [1] * n1
        pool.probs += torch.exp(top.values).tolist()
        pool.scores += top.values.tolist()
        # The beam, one entry per path: its pool index, the drafter output it was
        # drawn from, the fc input of its parent, and the rows of the tree part of
        # the drafter's KV holding its ancestors.
        beam = list(range(n1))
        parent_out = self.last_out.expand(n1, -1)
        u_parent = self.last_input.expand(n1, -1)
        anc_rows: list[list[int]] = [[] for _ in beam]
        # The tree part of the drafter's KV: the k/v rows of every tree node run so
        # far are appended after the context (and dropped by the next extend).
        if self._kv is not None:
            for g in self._kv:
                g.rewind()
        n_prev = 0  # tree rows so far
        L = self.length
        for depth in range(2, S + 1):
            B = len(beam)
            toks = torch.tensor([pool.tokens[i] for i in beam], device=dev)
            u = d.project(parent_out[None], toks[None])  # [1, B, H]
            # Mask: context all visible; earlier tree rows visible only if ancestors; self visible.
            allowed = torch.zeros(B, L + n_prev + B, dtype=torch.bool, device=dev)
            allowed[:, :L] = True
            flat = [b * (L + n_prev + B) + L + r for b, rows in enumerate(anc_rows) for r in rows]
            flat += [b * (L + n_prev + B) + L + n_prev + b for b in range(B)]
            allowed.view(-1)[torch.tensor(flat, device=dev)] = True
            pos = torch.full((1, B), L + depth - 2, device=dev)
            out, _ = d.transformer(u, pos, allowed[None, None], self._kv)
            logp = F.log_softmax(d.draft_logits(out[0]).float(), -1)  # [B, V']
            top = torch.topk(logp, min(k, logp.shape[-1]), dim=-1)
            base = torch.tensor([pool.scores[i] for i in beam], device=dev)
            cum = (top.values + base[:, None]).flatten()
            order = torch.argsort(cum, descending=True)
            kk = top.values.shape[1]
            src = torch.div(order, kk, rounding_mode="floor")  # beam entry of each ranked candidate
            start = len(pool.tokens)
            pool.tokens += vocab[top.indices].flatten()[order].tolist()
            pool.probs += torch.exp(top.values).flatten()[order].tolist()
            pool.scores += cum[order].tolist()
            src_l = src.tolist()
            pool.parents += [beam[b] for b in src_l]
            pool.depths += [depth] * len(src_l)
            survivors = src[:k]  # the new beam: the best k candidates
            survivors_l = src_l[:k]
            beam = list(range(start, start + len(survivors_l)))
            parent_out = out[0, survivors]
            u_parent = u[0, survivors]
            anc_rows = [anc_rows[b] + [n_prev + b] for b in survivors_l]
            n_prev += B
        return beam, parent_out, u_parent

    def _mlp_inputs(self, pool: CandidatePool, beam, parent_out, u_parent, S: int, depth_cap: int):
        """The MLP heads' input for every serial beam path [R, head_inputs*H] and the
        paths as (pool index, score); (None, []) when no MLP depth is drafted."""
        cfg = self.cfg
        if S >= depth_cap or not cfg.mlp_heads:
            return None, []
        toks = torch.tensor([pool.tokens[i] for i in beam], device=self.last_input.device)
        u_last = self.drafter.project(parent_out[None], toks[None])[0]  # [B, H]
        head_in = torch.cat([u_parent, u_last], -1) if cfg.head_inputs == 2 else u_last
        return head_in, [(i, pool.scores[i]) for i in beam]

    def _mlp_beam(self, pool: CandidatePool, head_in, mlp_roots, S: int, depth_cap: int,
                  settings: TreeSettings) -> Optional[_MLPChains]:
        """Depths S+1.. into ``pool``; returns what the full-tree extension needs,
        or None when the settings ask for none."""
        d = self.drafter
        n_mlp = min(self.cfg.mlp_heads, depth_cap - S)
        head_out = torch.stack(d.run_heads(head_in, n_mlp), 1)  # [R, n_mlp, H]
        logp_all = F.log_softmax(d.head_logits(head_out).float(), -1)  # [R, n_mlp, V']
        k = min(settings.mlp_top_k, logp_all.shape[-1])
        top_v, top_i = torch.topk(logp_all, k, dim=-1)  # [R, n_mlp, k]
        top_lp, top_p, top_tok = top_v.tolist(), torch.exp(top_v).tolist(), d.draft_vocab_ids[top_i].tolist()
        # MLP beam entries: (pool index, serial root r)
        mbeam = [(idx, r) for r, (idx, _) in enumerate(mlp_roots)]
        for j in range(n_mlp):
            depth = S + 1 + j
            cands = []
            for pidx, r in mbeam:
                base = 0.0 if pidx < 0 else pool.scores[pidx]
                lps = top_lp[r][j]
                cands += [(base + lps[q], pidx, r, q) for q in range(k)]
            cands.sort(key=lambda c: -c[0])
            start = len(pool.tokens)
            pool.tokens += [top_tok[r][j][q] for _, _, r, q in cands]
            pool.parents += [pidx for _, pidx, _, _ in cands]
            pool.depths += [depth] * len(cands)
            pool.probs += [top_p[r][j][q] for _, _, r, q in cands]
            pool.scores += [score for score, _, _, _ in cands]
            mbeam = [(start + rank, r) for rank, (_, _, r, _) in enumerate(cands[: settings.mlp_keep])]
        if settings.full_tree and settings.full_tree_tokens > 0:
            return _MLPChains(mlp_roots, top_tok, top_p, S, n_mlp)
        return None

    def _select(self, root_token: int, pool: CandidatePool, settings: TreeSettings, budget: Budget,
                chains: Optional[_MLPChains]) -> DraftTree:
        """The tree: the best ``total_tokens`` candidates, cut to what pays on a
        cost-aware tree, then the full-tree chains below its short leaves."""
        keep = select_nodes(pool.scores, pool.parents, settings.total_tokens)
        if budget.verify_cost is not None:
            # Best first; (score, index) order keeps every prefix a tree (parents come
            # first among equal scores), so cutting it anywhere is safe.
            ranked = sorted(keep, key=lambda i: (-pool.scores[i], i))
            extra = settings.full_tree_tokens if settings.full_tree and chains is not None else 0
            n = best_node_count([math.exp(pool.scores[i]) for i in ranked], budget.verify_cost, extra)
            keep = sorted(ranked[:n])
            if not keep:
                return DraftTree.root_only(root_token)
        extension = None
        if chains is not None:
            extension = _extension(keep, pool, chains, settings.full_tree_tokens)
        return tree_from_candidates(root_token, pool, keep, self.cfg.head_kind, extension=extension)


def _full_tree_chains(pool: CandidatePool, chains: _MLPChains, only=None):
    """For every pool node at depth >= S that descends from an MLP root (and is in
    ``only``, when given), the chain of the heads' top-1 tokens for the depths below
    it: a continuation that costs no drafting, because the heads already produced
    those distributions. Best score first (pool order among equal scores)."""
    S, n_mlp = chains.serial, chains.n_mlp
    root_of = {idx: r for r, (idx, _) in enumerate(chains.roots)}
    # MLP root of every pool node (parents precede children in the pool).
    node_root = [None] * len(pool.parents)
    for i, p in enumerate(pool.parents):
        node_root[i] = root_of[i] if i in root_of else (node_root[p] if p >= 0 else None)
    out = []
    for i in (range(len(pool.parents)) if only is None else sorted(only)):
        if pool.depths[i] < S or pool.depths[i] >= S + n_mlp:
            continue
        r = node_root[i]
        if r is None and -1 in root_of and S == 0:
            r = root_of[-1]
        if r is None:
            continue
        chain = [(chains.top_tok[r][jj][0], chains.top_p[r][jj][0]) for jj in range(pool.depths[i] - S, n_mlp)]
        out.append((pool.scores[i], i, chain))
    out.sort(key=lambda c: -c[0])
    return [(i, chain) for _, i, chain in out]


def _extension(keep, pool: CandidatePool, chains: _MLPChains, extra: int):
    """The full-tree chains to hang below the best short leaves of the base tree
    (pool nodes ``keep``), at most ``extra`` nodes in all: [(leaf, chain), ...]."""
    # Only chains below leaves of the base tree can be added: the others would use
    # up the extra budget and nothing would get added.
    inner = {pool.parents[i] for i in keep}
    leaves = [i for i in keep if i not in inner]
    chosen = []
    used = 0
    for leaf, chain in _full_tree_chains(pool, chains, only=leaves):
        if used >= extra:
            break
        chain = chain[: extra - used]
        chosen.append((leaf, chain))
        used += len(chain)
    return chosen
