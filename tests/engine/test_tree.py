"""Tree attention, position ids, KV-cache compaction, node selection and the real
drafter's trees, each checked against a brute-force reference."""
import math
import random

import pytest
import torch
from transformers import DynamicCache

from gumiho import Drafter, DrafterConfig, GenerationSettings, TreeSettings, stream
from gumiho.proposers import Budget, DraftSession
from gumiho.kvcache import cache_layers, keep_tree_entries
from gumiho.tree import DraftTree, ancestor_matrix, select_nodes, tree_from_candidates, verify_inputs

from helpers import tiny_target

VOCAB = 96


def random_tree(rng: random.Random, n: int, vocab: int = VOCAB) -> DraftTree:
    """A random tree of n nodes (root included), parents-first. Parents are drawn
    mostly among the last few nodes so that trees are deep as well as wide."""
    tree = DraftTree.root_only(rng.randrange(vocab))
    for i in range(1, n):
        parent = rng.randrange(max(0, i - 3), i) if rng.random() < 0.7 else rng.randrange(i)
        tree.tokens.append(rng.randrange(vocab))
        tree.parents.append(parent)
        tree.depths.append(tree.depths[parent] + 1)
        tree.probs.append(rng.random())
        tree.scores.append(0.0)
        tree.full_tree.append(False)
    return tree.check()


def brute_ancestors(tree: DraftTree, i: int) -> set[int]:
    """i and every node reached by walking parent links up to the root."""
    out = set()
    while i >= 0:
        out.add(i)
        i = tree.parents[i]
    return out


def test_ancestor_matrix_and_verify_inputs_match_brute_force():
    rng = random.Random(0)
    for trial in range(200):
        tree = random_tree(rng, rng.randint(1, 30))
        t = len(tree)
        m = ancestor_matrix(tree)
        expected = torch.tensor([[j in brute_ancestors(tree, i) for j in range(t)] for i in range(t)])
        assert torch.equal(m, expected)
        past = rng.randint(0, 12)
        for dtype in (torch.float32, torch.bfloat16):
            ids, pos, mask = verify_inputs(tree, past, "cpu", dtype)
            assert ids.tolist() == [tree.tokens]
            # Position of node i = past + its depth = past + number of its strict ancestors.
            assert pos.tolist() == [[past + len(brute_ancestors(tree, i)) - 1 for i in range(t)]]
            assert mask.shape == (1, 1, t, past + t) and mask.dtype == dtype
            allowed = torch.cat([torch.ones(t, past, dtype=torch.bool), expected], 1)
            assert torch.all(mask[0, 0][allowed] == 0)
            assert torch.all(mask[0, 0][~allowed] == torch.finfo(dtype).min)


def _scratch(target, seq: list[int]):
    """From-scratch forward over a whole sequence: last hidden state and logits of its last token."""
    out = target.model(torch.tensor([seq]), output_hidden_states=True)
    return out.hidden_states[-1][0, -1], out.logits[0, -1]


def _sequential_cache(target, seq: list[int]) -> DynamicCache:
    cache = DynamicCache()
    target.forward(seq, 0, cache)
    return cache


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_verify_and_cache_compaction_match_sequential(family, attn):
    """Several rounds of: random tree after the current cache -> one verify forward ->
    every node's logits and hidden state equal a from-scratch forward over
    context + root + that node's path -> keep a random accepted path -> the cache
    equals the one a sequential forward over context + accepted tokens builds."""
    target = tiny_target(family, vocab=VOCAB, hidden=32, layers=2, heads=4, kv_heads=2, seed=3)
    target.runtime_model.set_attn_implementation(attn)
    rng = random.Random(hash((family, attn)) % 1000)
    with torch.inference_mode():
        for episode in range(3):
            seq = [rng.randrange(2, VOCAB) for _ in range(rng.randint(1, 9))]  # in the cache
            cache = _sequential_cache(target, seq)
            root = rng.randrange(2, VOCAB)
            for rnd in range(4):
                past = len(seq)
                tree = random_tree(rng, rng.randint(1, 16))
                tree.tokens[0] = root
                if rnd == 3:  # a chain, fully accepted: the no-op compaction branch
                    tree = DraftTree([root] + [rng.randrange(VOCAB) for _ in range(4)], [-1, 0, 1, 2, 3],
                                     [0, 1, 2, 3, 4], [1.0] * 5, [0.0] * 5, [False] * 5)
                hidden, logits = target.forward(tree.tokens, past, cache, tree.parents)[:2]
                assert logits.shape == (len(tree), VOCAB)
                for i in range(len(tree)):
                    path_tokens = [root] + [tree.tokens[j] for j in tree.path_to(i)]
                    h_ref, l_ref = _scratch(target, seq + path_tokens)
                    assert torch.allclose(logits[i], l_ref, atol=1e-4), (family, attn, episode, rnd, i)
                    assert torch.allclose(hidden[i], h_ref, atol=1e-4)
                # Accept the path to a random node (or the whole chain), then compact.
                leaf = len(tree) - 1 if rnd == 3 else rng.randrange(len(tree))
                path = tree.path_to(leaf)
                keep_tree_entries(cache, past, [0] + path)
                seq = seq + [root] + [tree.tokens[j] for j in path]
                assert cache.get_seq_length() == len(seq)
                ref = _sequential_cache(target, seq)
                for got, want in zip(cache_layers(cache), cache_layers(ref)):
                    assert got.keys.shape == want.keys.shape
                    assert torch.allclose(got.keys, want.keys, atol=1e-5)
                    assert torch.allclose(got.values, want.values, atol=1e-5)
                root = rng.randrange(2, VOCAB)
            # The compacted cache keeps decoding correctly, token by token.
            for _ in range(3):
                l1 = target.forward([root], len(seq), cache).logits
                seq.append(root)
                assert torch.allclose(l1[0], _scratch(target, seq)[1], atol=1e-4)
                root = int(l1[0].argmax())


def random_pool(rng: random.Random, n: int, monotone: bool):
    """A candidate pool like the drafter's: parents index earlier entries (-1 = root's child).
    Monotone scores are cumulative log-probabilities (a child never above its parent;
    ties when p == 1 and between unrelated nodes); otherwise scores are arbitrary."""
    parents, scores = [], []
    for i in range(n):
        p = -1 if i == 0 or rng.random() < 0.3 else rng.randrange(i)
        parents.append(p)
        if monotone:
            step = 0.0 if rng.random() < 0.15 else round(math.log(rng.choice([0.5, 0.25, 0.1, 0.05])), 3)
            scores.append((scores[p] if p >= 0 else 0.0) + step)
        else:
            scores.append(-rng.choice([0.1, 0.5, 1.0, 2.0, 3.0]) * rng.random())
    return parents, scores


def _ancestor_closed(chosen: list[int], parents: list[int]) -> bool:
    s = set(chosen)
    return all(parents[i] < 0 or parents[i] in s for i in chosen)


def test_select_nodes_is_ancestor_closed_top_budget():
    rng = random.Random(1)
    for trial in range(400):
        n = rng.randint(1, 40)
        budget = rng.randint(1, 45)
        parents, scores = random_pool(rng, n, monotone=True)
        chosen = select_nodes(scores, parents, budget)
        assert chosen == sorted(set(chosen)) and len(chosen) == min(budget, n)
        assert _ancestor_closed(chosen, parents)
        # Exactly the top `budget` by score (ties broken by index: parents first).
        best = sorted(range(n), key=lambda i: (-scores[i], i))[:budget]
        assert chosen == sorted(best)
        # Arbitrary scores (not produced by the drafter): still ancestor-closed, within budget.
        parents, scores = random_pool(rng, n, monotone=False)
        chosen = select_nodes(scores, parents, budget)
        assert chosen == sorted(set(chosen)) and len(chosen) <= budget and _ancestor_closed(chosen, parents)
        if budget >= n:
            assert chosen == list(range(n))


def test_tree_from_candidates_keeps_each_paths_tokens():
    rng = random.Random(2)
    for trial in range(200):
        n = rng.randint(1, 30)
        parents, scores = random_pool(rng, n, monotone=True)
        tokens = [rng.randrange(VOCAB) for _ in range(n)]
        depths = []
        for i in range(n):
            depths.append(1 if parents[i] < 0 else depths[parents[i]] + 1)
        probs = [rng.random() for _ in range(n)]
        budget = rng.randint(1, 30)
        tree = tree_from_candidates(7, tokens, parents, depths, probs, scores, budget).check()
        keep = select_nodes(scores, parents, budget)
        assert len(tree) == len(keep) + 1 and tree.tokens[0] == 7
        for k, old in enumerate(keep, start=1):
            # The node's path in the tree spells the same tokens as the candidate's path in the pool.
            pool_path = []
            j = old
            while j >= 0:
                pool_path.append(tokens[j])
                j = parents[j]
            assert [tree.tokens[j] for j in tree.path_to(k)] == pool_path[::-1]
            assert tree.probs[k] == pytest.approx(probs[old]) and tree.scores[k] == pytest.approx(scores[old])


# ----------------------------------------------------------------------------- the real drafter

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


def test_prefill_with_last_logits_only_matches_the_full_prefill():
    """The decode loop's prefill asks for the last position's logits only; that row, the
    hidden states of every position and the cache must be what the full prefill gives."""
    target = tiny_target("llama")
    seq = list(range(3, 40))
    with torch.inference_mode():
        full_cache, last_cache = DynamicCache(), DynamicCache()
        h_full, l_full = target.forward(seq, 0, full_cache)[:2]
        h_last, l_last = target.forward(seq, 0, last_cache, last_logits_only=True)[:2]
        assert l_full.shape == (len(seq), target.config.vocab_size) and l_last.shape == (1, target.config.vocab_size)
        assert torch.equal(h_full, h_last)
        torch.testing.assert_close(l_last[0], l_full[-1])
        nxt = int(l_last[0].argmax())
        step = [target.forward([nxt], len(seq), c)[1]
                for c in (full_cache, last_cache)]
        assert torch.equal(step[0], step[1])


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
