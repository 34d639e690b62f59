"""Running a drafter during decoding: its own KV cache over the accepted context, and
the dynamic top-k expansion that turns its guesses into a DraftTree.

The drafter's context is always built from the target's real hidden states of the
accepted tokens (never from its own guesses), so a rejected draft leaves no trace.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .cpulinear import pack_linears
from .drafter import Drafter, GrowingKV, causal_mask
from .tree import DraftTree, TreeSettings, select_nodes, tree_from_candidates
from .verifycost import VerifyCost, best_node_count


class DraftSession:
    """One generation's drafting state. ``extend`` feeds accepted context, ``propose``
    drafts a tree below the current root token."""

    def __init__(self, drafter: Drafter):
        if drafter.fc.weight.device.type == "cpu":
            pack_linears(drafter)  # pre-packed weights for the few-row products of drafting
        self.drafter = drafter
        self.cfg = drafter.cfg
        self._kv: list[GrowingKV] | None = None  # per layer, k/v over the accepted context
        self.length = 0  # context positions processed
        self.last_out = None  # drafter output at the last context position: its guess of the next hidden state
        self.last_input = None  # fc input at the last context position, u_{n-1}

    @property
    def kv(self):
        """Per layer (k, v) [1, nkv, L, hd] over the accepted context (views), or None."""
        return None if self._kv is None else [g.context() for g in self._kv]

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
    def propose(self, root_token: int, settings: TreeSettings, max_depth: int | None = None,
                verify_cost: VerifyCost | None = None) -> DraftTree:
        """Draft a tree below ``root_token`` (the last emitted token). With
        ``verify_cost`` (a cost-aware tree), keep only as many of the best nodes as
        pay for the verify forward they make longer (gumiho.verifycost).

        Serial depths 1..S: a beam of ``top_k`` paths; each step runs the serial
        Transformer once on the beam, every node attending to the context and to its
        own ancestors. MLP depths S+1..: every beam path at depth S feeds the MLP heads
        once, all heads at once; the per-depth beam of ``mlp_keep`` paths then reads
        each head's distribution for its own serial ancestor (the heads' guesses do
        not depend on the tokens chosen at the MLP depths before them: that is what
        makes them parallel).
        """
        d, cfg = self.drafter, self.cfg
        depth_cap = min(settings.depth, cfg.max_depth)
        if max_depth is not None:
            depth_cap = min(depth_cap, max_depth)
        if depth_cap < 1 or self.last_input is None:
            return DraftTree.root_only(root_token)
        vocab = d.draft_vocab_ids
        dev = self.last_input.device

        # Candidate pool (parents index the pool, -1 = child of the root), as Python
        # lists filled a whole depth at a time. Each top-k result is read off the device
        # once (.tolist()), never element by element (one sync per element on a GPU).
        c_tok: list[int] = []
        c_par: list[int] = []
        c_dep: list[int] = []
        c_prob: list[float] = []
        c_score: list[float] = []

        S = min(cfg.serial_positions, depth_cap)
        if S >= 1:
            logp = F.log_softmax(d.draft_logits(self.last_out).float(), -1)
            top = torch.topk(logp, min(settings.top_k, logp.numel()))
            n1 = top.values.numel()
            c_tok += vocab[top.indices].tolist()
            c_par += [-1] * n1
            c_dep += [1] * n1
            c_prob += torch.exp(top.values).tolist()
            c_score += top.values.tolist()
            # The beam, one entry per path: its pool index, the drafter output it was
            # drawn from [B, H], the fc input of its parent [B, H], and the rows of the
            # tree part of the drafter's KV holding its ancestors.
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
                toks = torch.tensor([c_tok[i] for i in beam], device=dev)
                u = d.project(parent_out[None], toks[None])  # [1, B, H]
                # Mask: context all visible; earlier tree rows visible only if ancestors; self visible.
                allowed = torch.zeros(B, L + n_prev + B, dtype=torch.bool, device=dev)
                allowed[:, :L] = True
                flat = [k * (L + n_prev + B) + L + r for k, rows in enumerate(anc_rows) for r in rows]
                flat += [k * (L + n_prev + B) + L + n_prev + k for k in range(B)]
                allowed.view(-1)[torch.tensor(flat, device=dev)] = True
                pos = torch.full((1, B), L + depth - 2, device=dev)
                out, _ = d.transformer(u, pos, allowed[None, None], self._kv)
                logp = F.log_softmax(d.draft_logits(out[0]).float(), -1)  # [B, V']
                top = torch.topk(logp, min(settings.top_k, logp.shape[-1]), dim=-1)
                base = torch.tensor([c_score[i] for i in beam], device=dev)
                cum = (top.values + base[:, None]).flatten()
                order = torch.argsort(cum, descending=True)
                kk = top.values.shape[1]
                src = torch.div(order, kk, rounding_mode="floor")  # beam entry of each ranked candidate
                start = len(c_tok)
                c_tok += vocab[top.indices].flatten()[order].tolist()
                c_prob += torch.exp(top.values).flatten()[order].tolist()
                c_score += cum[order].tolist()
                src_l = src.tolist()
                c_par += [beam[b] for b in src_l]
                c_dep += [depth] * len(src_l)
                survivors = src[: settings.top_k]  # the new beam: the best top_k candidates
                survivors_l = src_l[: settings.top_k]
                beam = list(range(start, start + len(survivors_l)))
                parent_out = out[0, survivors]
                u_parent = u[0, survivors]
                anc_rows = [anc_rows[b] + [n_prev + b] for b in survivors_l]
                n_prev += B
            if S < depth_cap and cfg.mlp_heads:
                toks = torch.tensor([c_tok[i] for i in beam], device=dev)
                u_last = d.project(parent_out[None], toks[None])[0]  # [B, H]
                head_in = torch.cat([u_parent, u_last], -1) if cfg.head_inputs == 2 else u_last
                mlp_roots = [(i, c_score[i]) for i in beam]
            else:
                head_in, mlp_roots = None, []
        else:
            head_in = self.last_input[None]  # all-parallel: heads read the root's input
            mlp_roots = [(-1, 0.0)]

        chain_args = None
        if head_in is not None and mlp_roots:
            n_mlp = min(cfg.mlp_heads, depth_cap - S)
            head_out = torch.stack(d.run_heads(head_in, n_mlp), 1)  # [R, n_mlp, H]
            logp_all = F.log_softmax(d.draft_logits(head_out).float(), -1)  # [R, n_mlp, V']
            k = min(settings.mlp_top_k, logp_all.shape[-1])
            top_v, top_i = torch.topk(logp_all, k, dim=-1)  # [R, n_mlp, k]
            top_lp, top_p, top_tok = top_v.tolist(), torch.exp(top_v).tolist(), vocab[top_i].tolist()
            # MLP beam entries: (pool index, serial root r)
            mbeam = [(idx, r) for r, (idx, _) in enumerate(mlp_roots)]
            for j in range(n_mlp):
                depth = S + 1 + j
                cands = []
                for pidx, r in mbeam:
                    base = 0.0 if pidx < 0 else c_score[pidx]
                    lps = top_lp[r][j]
                    cands += [(base + lps[q], pidx, r, q) for q in range(k)]
                cands.sort(key=lambda c: -c[0])
                start = len(c_tok)
                c_tok += [top_tok[r][j][q] for _, _, r, q in cands]
                c_par += [pidx for _, pidx, _, _ in cands]
                c_dep += [depth] * len(cands)
                c_prob += [top_p[r][j][q] for _, _, r, q in cands]
                c_score += [score for score, _, _, _ in cands]
                mbeam = [(start + rank, r) for rank, (_, _, r, _) in enumerate(cands[: settings.mlp_keep])]
            if settings.full_tree and settings.full_tree_tokens > 0:
                chain_args = (mlp_roots, top_tok, top_p, S, n_mlp)

        budget = settings.total_tokens
        keep = select_nodes(c_score, c_par, budget)
        if verify_cost is not None:
            # Best first; (score, index) order keeps every prefix a tree (parents come
            # first among equal scores), so cutting it anywhere is safe.
            ranked = sorted(keep, key=lambda i: (-c_score[i], i))
            extra = settings.full_tree_tokens if settings.full_tree and chain_args is not None else 0
            n = best_node_count([math.exp(c_score[i]) for i in ranked], verify_cost, extra)
            keep = sorted(ranked[:n])
            if not keep:
                return DraftTree.root_only(root_token)
        extension = None
        if chain_args is not None:
            extension = self._extension(keep, c_par, c_dep, c_score, *chain_args, settings.full_tree_tokens)
        return tree_from_candidates(root_token, c_tok, c_par, c_dep, c_prob, c_score, budget,
                                    extension=extension, keep=keep)

    @staticmethod
    def _full_tree_chains(c_par, c_dep, c_score, mlp_roots, top_tok, top_p, S, n_mlp, only=None):
        """For every pool node at depth >= S that descends from an MLP root (and is in
        ``only``, when given), the chain of the heads' top-1 tokens for the depths below
        it: a continuation that costs no drafting, because the heads already produced
        those distributions. ``top_tok``/``top_p`` [R][n_mlp][k]: the heads' top tokens
        and probabilities. Best score first (pool order among equal scores)."""
        root_of = {idx: r for r, (idx, _) in enumerate(mlp_roots)}
        # MLP root of every pool node (parents precede children in the pool).
        node_root = [None] * len(c_par)
        for i, p in enumerate(c_par):
            node_root[i] = root_of[i] if i in root_of else (node_root[p] if p >= 0 else None)
        chains = []
        for i in (range(len(c_par)) if only is None else sorted(only)):
            if c_dep[i] < S or c_dep[i] >= S + n_mlp:
                continue
            r = node_root[i]
            if r is None and -1 in root_of and S == 0:
                r = root_of[-1]
            if r is None:
                continue
            chain = [(top_tok[r][jj][0], top_p[r][jj][0]) for jj in range(c_dep[i] - S, n_mlp)]
            chains.append((c_score[i], i, chain))
        chains.sort(key=lambda c: -c[0])
        return [(i, chain) for _, i, chain in chains]

    @classmethod
    def _extension(cls, keep, c_par, c_dep, c_score, mlp_roots, top_tok, top_p, S, n_mlp, extra):
        """The full-tree chains to hang below the best short leaves of the base tree
        (pool nodes ``keep``), at most ``extra`` nodes in all: [(leaf, chain), ...]."""
        # Only chains below leaves of the base tree can be added: the others would use
        # up the extra budget and nothing would get added.
        inner = {c_par[i] for i in keep}
        leaves = [i for i in keep if i not in inner]
        chosen = []
        used = 0
        for leaf, chain in cls._full_tree_chains(c_par, c_dep, c_score, mlp_roots, top_tok, top_p, S, n_mlp,
                                                 only=leaves):
            if used >= extra:
                break
            chain = chain[: extra - used]
            chosen.append((leaf, chain))
            used += len(chain)
        return chosen
