"""gumiho.proposers.learned: the learned drafter's session (DraftSession) drafts
well-formed trees of the heads a kind has (each node's probability recomputed by
running the drafter along its path alone), labels every drafted token with its
head, runs only the heads a tree reaches, and keeps a growing context KV equal to a
from-scratch run."""
import math
import random

import pytest
import torch
from transformers import DynamicCache

from gumiho import Drafter, DrafterConfig, GenerationSettings, TreeSettings, stream
from gumiho.drafter import causal_mask
from gumiho.proposers import Budget, DraftSession
from gumiho.runtimes.kvcache import keep_tree_entries
from gumiho.tree import DraftTree
from helpers import tiny_target

VOCAB = 96


TREE_SETTINGS = [
    TreeSettings(),
    TreeSettings(total_tokens=8, depth=3, serial_top_k=2, full_tree=False),
    TreeSettings(total_tokens=30, depth=7, serial_top_k=5, mlp_top_k=3, mlp_keep=8, full_tree=True, full_tree_tokens=8),
    TreeSettings(total_tokens=6, depth=7, serial_top_k=1, mlp_top_k=1, mlp_keep=1, full_tree=True, full_tree_tokens=3),
    TreeSettings(total_tokens=1, depth=1, serial_top_k=1, full_tree=False),
    TreeSettings(total_tokens=12, depth=5, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree=False),
    TreeSettings(total_tokens=9, depth=7, serial_top_k=1, mlp_top_k=2, mlp_keep=2, full_tree=False),
]


EXPECTED_HEADS = {
    "gumiho": ["serial"] * 2 + ["mlp"] * 5,
    "serial": ["serial"] * 7,
    "parallel": ["mlp"] * 7,
    "eagle": ["serial"] * 7,
    "eagle3": ["serial"] * 7,
}


def random_drafter(target, kind, seed=0):
    torch.manual_seed(seed)
    # These tests hand the drafter the target's final-norm states: eagle3 without fused layers
    # (EAGLE-3's use_aux_hidden_state off) reads exactly those.
    drafter = Drafter(DrafterConfig.for_target(target.config, kind, feature_layers=None)).eval().attach_target(
        target.model)
    with torch.no_grad():  # wake the zero-initialised residual blocks so every head really computes
        for head in drafter.heads:
            for block in head:
                block.linear.weight.normal_(0, 0.1)
    return drafter


def brute_node_probs(drafter, session, tree: DraftTree, node: int):
    """The drafter's probability of ``node``'s token (and the top probability of that
    distribution), recomputed by running the drafter along that node's path alone.

    With out_0 = the drafter's output at the last context position and u_0 its input:
    for d = 1..S, dist_d = softmax(lm(out_{d-1})), u_d = fc(embed(tok_d), out_{d-1}),
    out_d = the serial Transformer on u_d at context length + d - 1, attending to the
    context and to u_1..u_d (run one position at a time here); for d = S+1+j,
    dist_d = softmax(lm(head_j(cat(u_{S-1}, u_S)))), or head_j(u_0) when S = 0."""
    cfg = drafter.cfg
    path = tree.path_to(node)
    toks = [tree.tokens[j] for j in path]
    S, depth = cfg.serial_positions, len(path)
    out, kv, us = session.last_out, session.kv, [session.last_input]
    with torch.no_grad():
        for d in range(1, min(depth, S) + 1):
            logits = drafter.draft_logits(out)
            if d == depth:
                break
            u = drafter.project(out[None, None], torch.tensor([[toks[d - 1]]]))
            us.append(u[0, 0])
            if d < S:
                length = session.length + d - 1
                mask = torch.ones(1, 1, 1, length + 1, dtype=torch.bool)
                o, new = drafter.transformer(u, torch.tensor([[length]]), mask, kv)
                kv = [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(kv, new)]
                out = o[0, 0]
        if depth > S:
            head_in = us[0] if S == 0 else torch.cat([us[S - 1], us[S]])
            logits = drafter.draft_logits(drafter.run_heads(head_in[None])[depth - S - 1][0])
    dist = torch.softmax(logits.float(), -1)
    vocab = drafter.draft_vocab_ids.tolist()
    return float(dist[vocab.index(tree.tokens[node])]), float(dist.max())


@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_real_drafter_trees_are_well_formed(kind):
    target = tiny_target("llama", vocab=VOCAB, hidden=32, seed=4)
    drafter = random_drafter(target, kind)
    cfg = drafter.cfg
    rng = random.Random(5)
    depths_seen, full_seen = set(), False
    with torch.inference_mode():
        for trial in range(3):
            prompt = [rng.randrange(2, VOCAB) for _ in range(rng.randint(2, 12))]
            cache = DynamicCache()
            hidden, logits = target.forward(prompt, 0, cache)[:2]
            root = int(logits[-1].argmax())
            session = DraftSession(drafter)
            session.extend(hidden, torch.tensor(prompt[1:] + [root]))
            for settings in TREE_SETTINGS:
                for max_depth in (None, 2, 1):
                    tree = session.propose(root, Budget(settings, max_depth=max_depth)).check()
                    cap = min(settings.depth, cfg.max_depth, max_depth or 99)
                    assert tree.tokens[0] == root and max(tree.depths) <= cap
                    extra = settings.full_tree_tokens if settings.full_tree else 0
                    n_full = sum(tree.full_tree)
                    assert len(tree) - 1 - n_full <= settings.total_tokens and n_full <= extra
                    if settings.total_tokens >= 1:
                        assert len(tree) >= 2  # something was drafted
                    children = tree.children()
                    for i, ch in enumerate(children):
                        sib = [tree.tokens[c] for c in ch]
                        assert len(sib) == len(set(sib)), "duplicate sibling tokens"
                    for i in range(1, len(tree)):
                        assert tree.tokens[i] in set(drafter.draft_vocab_ids.tolist())
                        assert 0 < tree.probs[i] <= 1
                        assert tree.scores[i] == pytest.approx(tree.scores[tree.parents[i]] + math.log(tree.probs[i]),
                                                               abs=1e-4)
                        if tree.full_tree[i]:  # full-tree nodes hang below leaves of the base tree
                            p = tree.parents[i]
                            assert tree.full_tree[p] or all(not tree.full_tree[c] or c == i for c in children[p])
                        # Provenance: depth d comes from the serial Transformer (d <= S) or from MLP head d-S-1.
                        prob, top = brute_node_probs(drafter, session, tree, i)
                        assert tree.probs[i] == pytest.approx(prob, rel=1e-3, abs=1e-6), (kind, i, tree.depths[i])
                        if tree.full_tree[i]:
                            assert prob == pytest.approx(top, rel=1e-4)  # the head's top-1 guess
                        assert cfg.head_kind(tree.depths[i]) == EXPECTED_HEADS[kind][tree.depths[i] - 1]
                    if cfg.mlp_heads and max_depth is None and settings.full_tree:
                        # Full tree: the base tree's short leaves are extended by the heads' top-1
                        # guesses. The chain setting (6 nodes, depth 7) gets exactly its 7th node.
                        assert sum(tree.full_tree) >= 1
                        if settings is TREE_SETTINGS[3]:
                            assert sum(tree.full_tree) == 1 and max(tree.depths) == 7 and len(tree) == 8
                    depths_seen.update(tree.depths[1:])
                    full_seen |= any(tree.full_tree)
            # Feed a couple of accepted positions and draft again from the grown context.
            tree = session.propose(root, Budget(TREE_SETTINGS[0]))
            acc = tree.path_to(1)
            hidden, logits = target.forward(tree.tokens, len(prompt), cache, tree.parents)[:2]
            kept = [0] + acc
            keep_tree_entries(cache, len(prompt), kept)
            nxt = [tree.tokens[j] for j in acc] + [int(logits[kept[-1]].argmax())]
            session.extend(hidden[kept], torch.tensor(nxt))
            tree2 = session.propose(nxt[-1], Budget(TREE_SETTINGS[2])).check()
            for i in range(1, len(tree2)):
                assert tree2.probs[i] == pytest.approx(brute_node_probs(drafter, session, tree2, i)[0], rel=1e-3,
                                                       abs=1e-6)
    # Every draft position was produced somewhere, and the full-tree extension was used.
    assert depths_seen == set(range(1, cfg.max_depth + 1))
    assert full_seen == (cfg.mlp_heads > 0)  # the all-serial drafters have no MLP heads to extend with


@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_stream_labels_heads_by_depth(kind):
    """In the event stream, every drafted token (accepted or rejected) carries the
    position of its tree depth and the head kind of that position."""
    target = tiny_target("llama", vocab=VOCAB, hidden=32, seed=4)
    drafter = random_drafter(target, kind)
    seen = set()
    for settings in (TREE_SETTINGS[0], TREE_SETTINGS[2]):
        steps = list(stream(target, [5, 9, 13, 2], drafter, GenerationSettings(max_new_tokens=20, tree=settings),
                            keep_trees=True))
        for s in steps[1:]:
            tree = s.tree.check()
            for k, node in enumerate(s.accepted_nodes[:len(s.emitted)]):
                e = s.emitted[k]
                assert e.position == tree.depths[node] == k + 1
                assert e.head == EXPECTED_HEADS[kind][e.position - 1] and e.token == tree.tokens[node]
                seen.add(e.head)
            stop = s.accepted_nodes[-1] if s.accepted_nodes else 0
            assert sorted(r.token for r in s.rejected) == sorted(tree.tokens[c] for c in tree.children()[stop])
            for r in s.rejected:
                assert r.position == tree.depths[stop] + 1 and r.head == EXPECTED_HEADS[kind][r.position - 1]
                seen.add(r.head)
            if s.emitted and len(s.emitted) > len(s.accepted_nodes):
                assert s.emitted[-1].head == "target" and s.emitted[-1].position == 0
    assert seen  # drafted tokens were labelled


@pytest.mark.parametrize("depth, heads_run", [(3, 1), (5, 3), (7, 5), (2, 0)])
def test_drafting_runs_only_the_heads_the_tree_reaches(depth, heads_run):
    """A Gumiho drafter (2 serial positions, 5 MLP heads) drafting a tree of depth D
    runs heads 1..D-2 and no others: each head is a pass over its weights."""
    target = tiny_target("llama", vocab=VOCAB, hidden=32, seed=4)
    drafter = random_drafter(target, "gumiho")
    calls = [0] * len(drafter.heads)
    for j, head in enumerate(drafter.heads):
        head.register_forward_hook(lambda mod, args, out, j=j: calls.__setitem__(j, calls[j] + 1))
    session = DraftSession(drafter)
    with torch.no_grad():
        hidden = target.model(torch.tensor([[5, 6, 7, 8]]), output_hidden_states=True).hidden_states[-1][0]
    session.extend(hidden, torch.tensor([6, 7, 8, 9]))
    tree = session.propose(9, Budget(TreeSettings(total_tokens=12, depth=depth, serial_top_k=2, mlp_top_k=2, mlp_keep=2)))
    assert calls == [1] * heads_run + [0] * (len(drafter.heads) - heads_run)
    assert max(tree.depths) <= depth and len(tree) > 1


def test_drafter_growing_kv_matches_concatenation():
    """Many extend/propose rounds past the first buffer capacity: the session's
    context k/v equal a from-scratch run of the drafter over the whole context."""
    target = tiny_target("llama", vocab=96, hidden=32, seed=4, ctx=2048)
    torch.manual_seed(0)
    drafter = Drafter(DrafterConfig.for_target(target.config, "serial")).eval().attach_target(target.model)
    session = DraftSession(drafter)
    rng = random.Random(3)
    hs, toks = [], []
    with torch.inference_mode():
        for rnd in range(80):
            k = rng.randint(1, 6)
            h, t = torch.randn(k, 32), torch.tensor([rng.randrange(96) for _ in range(k)])
            session.extend(h, t)
            hs.append(h)
            toks.append(t)
            session.propose(int(t[-1]), Budget(TreeSettings(total_tokens=12, serial_top_k=3)))  # leaves tree rows behind
        u = drafter.project(torch.cat(hs)[None], torch.cat(toks)[None])
        L = u.shape[1]
        assert L > 256 and session.length == L
        _, new = drafter.transformer(u, torch.arange(L)[None], causal_mask(L, 0, u.device))
    for (k, v), (rk, rv) in zip(session.kv, new):
        assert torch.allclose(k, rk, atol=1e-4) and torch.allclose(v, rv, atol=1e-4)
