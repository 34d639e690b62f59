"""Running a drafter during decoding: its own KV cache over the accepted context, and
the dynamic top-k expansion that turns its guesses into a DraftTree.

The drafter's context is always built from the target's real hidden states of the
accepted tokens (never from its own guesses), so a rejected draft leaves no trace.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .drafter import Drafter, causal_mask
from .tree import DraftTree, TreeSettings, select_nodes, tree_from_candidates


class DraftSession:
    """One generation's drafting state. ``extend`` feeds accepted context, ``propose``
    drafts a tree below the current root token."""

    def __init__(self, drafter: Drafter):
        self.drafter = drafter
        self.cfg = drafter.cfg
        self.kv = None  # per layer (k, v) [1, nkv, L, hd] over the accepted context
        self.length = 0  # context positions processed
        self.last_out = None  # drafter output at the last context position: its guess of the next hidden state
        self.last_input = None  # fc input at the last context position, u_{n-1}

    @torch.no_grad()
    def extend(self, hidden: torch.Tensor, next_ids: torch.Tensor):
        """Add positions whose target hidden states are ``hidden`` [T, H] and whose
        following tokens are ``next_ids`` [T] (pairs (h_i, x_{i+1}))."""
        d = self.drafter
        u = d.project(hidden[None], next_ids[None].to(hidden.device))  # [1, T, H]
        self.last_input = u[0, -1]
        if self.cfg.num_layers == 0 or self.cfg.serial_positions == 0:
            self.length += u.shape[1]
            return
        t = u.shape[1]
        pos = torch.arange(self.length, self.length + t, device=u.device)[None]
        out, new = d.transformer(u, pos, causal_mask(t, self.length, u.device), self.kv)
        if self.kv is None:
            self.kv = new
        else:
            self.kv = [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(self.kv, new)]
        self.length += t
        self.last_out = out[0, -1]

    @torch.no_grad()
    def propose(self, root_token: int, settings: TreeSettings, max_depth: int | None = None) -> DraftTree:
        """Draft a tree below ``root_token`` (the last emitted token).

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

        # Candidate pool (parents index the pool, -1 = child of the root).
        c_tok: list[int] = []
        c_par: list[int] = []
        c_dep: list[int] = []
        c_prob: list[float] = []
        c_score: list[float] = []

        # Candidates arrive as Python numbers: each top-k result is read off the device
        # once (.tolist()), never element by element (one sync per element on a GPU).
        def add(tok, par, dep, prob, score):
            c_tok.append(tok)
            c_par.append(par)
            c_dep.append(dep)
            c_prob.append(prob)
            c_score.append(score)
            return len(c_tok) - 1

        S = min(cfg.serial_positions, depth_cap)
        # Beam entries: (pool index, fc input u of that node or None, parent output).
        if S >= 1:
            logp = F.log_softmax(d.draft_logits(self.last_out).float(), -1)
            top = torch.topk(logp, min(settings.top_k, logp.numel()))
            beam = []
            for lp, pr, tok in zip(top.values.tolist(), torch.exp(top.values).tolist(), vocab[top.indices].tolist()):
                beam.append({"idx": add(tok, -1, 1, pr, lp), "parent_out": self.last_out,
                             "u_parent": self.last_input, "anc_rows": []})
            # Tree part of the drafter's KV: per layer, k/v of every node run so far.
            tree_kv = None
            run_nodes: list[dict] = []  # node dicts whose k/v rows are in tree_kv, in order
            for depth in range(2, S + 1):
                toks = torch.tensor([c_tok[b["idx"]] for b in beam], device=dev)
                parent_out = torch.stack([b["parent_out"] for b in beam])
                u = d.project(parent_out[None], toks[None])  # [1, B, H]
                for k, b in enumerate(beam):
                    b["u"] = u[0, k]
                n_prev = len(run_nodes)
                B = len(beam)
                # Mask: context all visible; earlier tree rows visible only if ancestors; self visible.
                allowed = torch.zeros(B, self.length + n_prev + B, dtype=torch.bool, device=dev)
                allowed[:, : self.length] = True
                for k, b in enumerate(beam):
                    for r in b["anc_rows"]:
                        allowed[k, self.length + r] = True
                    allowed[k, self.length + n_prev + k] = True
                past = None
                if self.kv is not None:
                    past = self.kv if tree_kv is None else [
                        (torch.cat([ck, tk], 2), torch.cat([cv, tv], 2)) for (ck, cv), (tk, tv) in zip(self.kv, tree_kv)]
                pos = torch.full((1, B), self.length + depth - 2, device=dev)
                out, new = d.transformer(u, pos, allowed[None, None], past)
                tree_kv = new if tree_kv is None else [
                    (torch.cat([tk, nk], 2), torch.cat([tv, nv], 2)) for (tk, tv), (nk, nv) in zip(tree_kv, new)]
                for k, b in enumerate(beam):
                    b["row"] = n_prev + k
                    run_nodes.append(b)
                logp = F.log_softmax(d.draft_logits(out[0]).float(), -1)  # [B, V']
                top = torch.topk(logp, min(settings.top_k, logp.shape[-1]), dim=-1)
                base = torch.tensor([c_score[b["idx"]] for b in beam], device=dev)
                cum = (top.values + base[:, None]).flatten()
                order = torch.argsort(cum, descending=True)
                tok_l, prob_l, cum_l = vocab[top.indices].tolist(), torch.exp(top.values).tolist(), cum.tolist()
                new_beam = []
                kk = top.values.shape[1]
                for rank, flat in enumerate(order.tolist()):
                    bi, ki = divmod(flat, kk)
                    parent = beam[bi]
                    idx = add(tok_l[bi][ki], parent["idx"], depth, prob_l[bi][ki], cum_l[flat])
                    if rank < settings.top_k:
                        new_beam.append({"idx": idx, "parent_out": out[0, bi], "u_parent": parent["u"],
                                         "anc_rows": parent["anc_rows"] + [parent["row"]]})
                beam = new_beam
            if S < depth_cap and cfg.mlp_heads:
                toks = torch.tensor([c_tok[b["idx"]] for b in beam], device=dev)
                parent_out = torch.stack([b["parent_out"] for b in beam])
                u_last = d.project(parent_out[None], toks[None])[0]  # [B, H]
                u_prev = torch.stack([b["u_parent"] for b in beam])
                head_in = torch.cat([u_prev, u_last], -1) if cfg.head_inputs == 2 else u_last
                mlp_roots = [(b["idx"], c_score[b["idx"]]) for b in beam]
            else:
                head_in, mlp_roots = None, []
        else:
            head_in = self.last_input[None]  # all-parallel: heads read the root's input
            mlp_roots = [(-1, 0.0)]

        extension = []
        if head_in is not None and mlp_roots:
            n_mlp = min(cfg.mlp_heads, depth_cap - S)
            head_out = torch.stack(d.run_heads(head_in)[:n_mlp], 1)  # [R, n_mlp, H]
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
                    for q in range(k):
                        cands.append((base + top_lp[r][j][q], pidx, r, q))
                cands.sort(key=lambda c: -c[0])
                mbeam = []
                for rank, (score, pidx, r, q) in enumerate(cands):
                    idx = add(top_tok[r][j][q], pidx, depth, top_p[r][j][q], score)
                    if rank < settings.mlp_keep:
                        mbeam.append((idx, r))
            if settings.full_tree and settings.full_tree_tokens > 0:
                extension = self._full_tree_chains(c_par, c_dep, c_score, mlp_roots, top_tok, top_p, S, n_mlp)

        budget = settings.total_tokens
        tree = tree_from_candidates(root_token, c_tok, c_par, c_dep, c_prob, c_score, budget)
        if extension:
            tree = self._extend_leaves(tree, root_token, c_tok, c_par, c_dep, c_prob, c_score, budget,
                                       extension, settings.full_tree_tokens)
        return tree

    @staticmethod
    def _full_tree_chains(c_par, c_dep, c_score, mlp_roots, top_tok, top_p, S, n_mlp):
        """For every pool node at depth >= S that descends from an MLP root, the chain
        of the heads' top-1 tokens for the depths below it: a continuation that costs
        no drafting, because the heads already produced those distributions.
        ``top_tok``/``top_p`` [R][n_mlp][k]: the heads' top tokens and probabilities."""
        root_of = {idx: r for r, (idx, _) in enumerate(mlp_roots)}
        # MLP root of every pool node (parents precede children in the pool).
        node_root = [None] * len(c_par)
        for i, p in enumerate(c_par):
            node_root[i] = root_of[i] if i in root_of else (node_root[p] if p >= 0 else None)
        chains = []
        for i in range(len(c_par)):
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

    @staticmethod
    def _extend_leaves(tree, root_token, c_tok, c_par, c_dep, c_prob, c_score, budget, chains, extra):
        """Re-build the tree with full-tree chains under its best short leaves, adding
        at most ``extra`` nodes."""
        # Only chains below leaves of the base tree can be added: skip the others here,
        # or they use up the extra budget and nothing gets added.
        base = set(select_nodes(c_score, c_par, budget))
        inner = {c_par[i] for i in base}
        chosen = []
        used = 0
        for leaf, chain in chains:
            if used >= extra:
                break
            if leaf not in base or leaf in inner:
                continue
            chain = chain[: extra - used]
            chosen.append((leaf, chain))
            used += len(chain)
        return tree_from_candidates(root_token, c_tok, c_par, c_dep, c_prob, c_score, budget, extension=chosen)
