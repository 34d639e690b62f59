"""Tree attention, position ids, KV-cache compaction and node selection, each checked
against a brute-force reference (the learned drafter's trees: tests/proposers/test_learned.py)."""
import math
import random

import pytest
import torch
from transformers import DynamicCache

from gumiho.proposers.selection import CandidatePool, select_nodes, tree_from_candidates
from gumiho.runtimes.kvcache import cache_layers, keep_tree_entries
from gumiho.runtimes.treemask import ancestor_matrix, verify_inputs
from gumiho.tree import DraftTree
from helpers import tiny_target

VOCAB = 96


def random_tree(rng: random.Random, n: int, vocab: int = VOCAB) -> DraftTree:
    """A random tree of n nodes (root included), parents-first. Parents are drawn
    mostly among the last few nodes so that trees are deep as well as wide."""
    tree = DraftTree.root_only(rng.randrange(vocab))
    for i in range(1, n):
        parent = rng.randrange(max(0, i - 3), i) if rng.random() < 0.7 else rng.randrange(i)
        tree.add(rng.randrange(vocab), parent, rng.random(), 0.0, "serial")
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
                    tree = DraftTree.of([root] + [rng.randrange(VOCAB) for _ in range(4)], [-1, 0, 1, 2, 3])
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
        keep = select_nodes(scores, parents, budget)
        pool = CandidatePool(tokens, parents, depths, probs, scores)
        tree = tree_from_candidates(7, pool, keep, lambda d: "serial" if d <= 2 else "mlp").check()
        assert tree.heads == ["target"] + ["serial" if d <= 2 else "mlp" for d in tree.depths[1:]]
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


