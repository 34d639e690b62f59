"""The copy proposer: its index against a brute-force search, its chain merged into
draft trees, and decoding with copy nodes exactly the target's (greedy and sampling)."""
import random

import pytest
import torch

from gumiho import (
    CopySettings,
    Drafter,
    DrafterConfig,
    GenerationSettings,
    GumihoError,
    TreeSettings,
    stream,
    with_copy,
)
from gumiho.engine.metrics import summarize
from gumiho.proposers import CopyIndex, split_copy
from gumiho.proposers.selection import add_chain
from gumiho.runtimes.treemask import verify_inputs
from gumiho.tree import DraftTree
from helpers import OracleDrafter, tiny_target


def brute_match(tokens, min_match, max_match):
    """The longest suffix (min_match..max_match tokens) occurring earlier with a
    follower, and the follower position of its latest such occurrence: a rescan."""
    L = len(tokens)
    for n in range(min(max_match, L - 1), min_match - 1, -1):
        suffix = tokens[L - n:]
        for end in range(L - 1, n - 1, -1):  # an occurrence ending at `end` (exclusive), followed by tokens[end]
            if tokens[end - n:end] == suffix:
                return n, end
    return 0, -1


@pytest.mark.parametrize("vocab", [2, 3, 5, 40])
def test_index_matches_brute_force(vocab):
    rng = random.Random(vocab)
    for trial in range(30):
        idx = CopyIndex(max_match=rng.randint(1, 6))
        toks = []
        for _ in range(rng.randint(1, 80)):
            t = rng.randrange(vocab)
            idx.append(t)
            toks.append(t)
            for min_match in (1, 2, 3):
                if min_match > idx.max_match:
                    continue
                want = brute_match(toks, min_match, idx.max_match)
                assert idx.match(min_match) == want, (toks, min_match)
                n, at = want
                assert idx.continuation(4, min_match) == (toks[at:at + 4] if n else [])


def test_continuation_examples():
    idx = CopyIndex(max_match=4)
    idx.extend([7, 8, 9, 10, 11, 3, 7, 8])
    assert idx.match(2) == (2, 2)
    assert idx.continuation(3, 2) == [9, 10, 11]
    assert idx.continuation(3, 3) == []  # "3 7 8" never occurred before
    # A repeating pattern runs into the present end and stops there.
    idx = CopyIndex(max_match=3)
    idx.extend([5, 6, 5, 6, 5])
    assert idx.continuation(10, 1) == [6, 5]


def test_add_chain_merges_then_branches():
    tree = DraftTree.root_only(4)
    # root -> 10 -> 11, root -> 20
    for tok, parent in ((10, 0), (20, 0), (11, 1)):
        tree.add(tok, parent, 0.5, -0.7, "serial")
    out = add_chain(tree, [10, 11, 12, 13])
    assert out.tokens == [4, 10, 20, 11, 12, 13]
    assert out.parents == [-1, 0, 0, 1, 3, 4]
    assert out.depths == [0, 1, 1, 2, 3, 4]
    assert out.copied == [False, False, False, False, True, True]
    out.check()
    assert len(tree) == 4  # the input tree is not changed
    # Fully merged: nothing added. A chain diverging at the first token: a branch of the root.
    assert len(add_chain(tree, [10, 11])) == 4
    side = add_chain(tree, [30, 31, 32], max_depth=2)
    assert side.tokens[4:] == [30, 31] and side.parents[4:] == [0, 4] and side.copied[4:] == [True, True]
    assert side.heads == ["target", "serial", "serial", "serial", "copy", "copy"]
    # Its verify inputs are well formed (positions by depth, the mask by ancestry).
    ids, pos, mask = verify_inputs(side, 7, "cpu", torch.float32)
    assert pos.tolist() == [[7, 8, 8, 9, 8, 9]]
    assert (mask[0, 0, 5, 7 + 4] == 0) and (mask[0, 0, 5, 7 + 1] < 0)


def test_settings_are_checked():
    for bad in (dict(max_tokens=0), dict(min_match=3, max_match=2), dict(max_tokens=True), dict(max_match=99)):
        with pytest.raises(GumihoError):
            with_copy(None, **bad)
    with pytest.raises(GumihoError):
        with_copy(with_copy(None))
    with pytest.raises(GumihoError):
        with_copy("a drafter")
    with pytest.raises(GumihoError):
        with_copy(None, no_such_setting=1)
    assert split_copy(None) == (None, None)


def _repetitive_prompts(vocab, n, seed):
    """Prompts that repeat a phrase, so that the copy proposer finds matches."""
    g = random.Random(seed)
    out = []
    for _ in range(n):
        phrase = [g.randrange(2, vocab) for _ in range(g.randint(4, 10))]
        out.append(phrase + [g.randrange(2, vocab) for _ in range(3)] + phrase + phrase[:2])
    return out


def _run(target, prompt, drafter, **kw):
    steps = list(stream(target, prompt, drafter, GenerationSettings(**kw)))
    return [t for s in steps for t in s.tokens], steps


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_copy_decoding_is_lossless_greedy(family):
    # Tiny random targets with the default init fall into loops: their greedy answers repeat themselves.
    target = tiny_target(family, seed=3)
    torch.manual_seed(0)
    learned = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    copied = accepted_copy = 0
    for i, prompt in enumerate(_repetitive_prompts(96, 5, seed=len(family))):
        ref, _ = _run(target, prompt, None, max_new_tokens=48)
        oracle = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=i)
        for drafter in (with_copy(None), with_copy(learned), with_copy(oracle, max_tokens=4, min_match=1)):
            out, steps = _run(target, prompt, drafter, max_new_tokens=48,
                              tree=TreeSettings(total_tokens=6, depth=4, serial_top_k=2))
            assert out == ref
            st = summarize(steps, 8)
            copied += st.copy_nodes
            accepted_copy += st.accepted_by_head.get("copy", 0)
            for s in steps[1:]:
                assert s.copy_nodes <= s.drafted
                for e in s.emitted:
                    assert e.head in ("serial", "mlp", "copy", "target")
    assert copied > 20 and accepted_copy > 5  # copy nodes were really proposed and accepted


def test_every_node_records_the_head_that_proposed_it():
    """The tree says who proposed each node (the learned drafter's serial steps and MLP
    heads by their depth, the copy proposer's nodes, the root the target's), and the
    events' tokens carry the same words: nothing downstream works it out again."""
    target = tiny_target("llama", seed=3)
    torch.manual_seed(0)
    learned = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    S = learned.cfg.serial_positions
    prompt = _repetitive_prompts(96, 1, seed=1)[0]
    families = set()
    for drafter in (learned, with_copy(learned), with_copy(None)):
        steps = list(stream(target, prompt, drafter, GenerationSettings(max_new_tokens=24, tree=TreeSettings(
            total_tokens=12, depth=5, serial_top_k=2, full_tree=True, full_tree_tokens=3)), keep_trees=True))
        for s in steps[1:]:
            tree = s.tree
            assert len(tree.heads) == len(tree) and tree.heads[0] == "target"
            for i in range(1, len(tree)):
                want = "copy" if tree.copied[i] else ("serial" if tree.depths[i] <= S else "mlp")
                assert tree.heads[i] == want
            for node, e in zip(s.accepted_nodes, s.emitted):
                assert e.head == tree.heads[node]
            families |= set(tree.heads[1:])
    assert families == {"serial", "mlp", "copy"}


def test_copy_alone_is_prompt_lookup():
    """With no learned drafter every drafted node is a copy node, and a text that
    repeats the prompt is taken over in long runs."""
    target = tiny_target("llama", seed=0)
    prompt = [5, 17, 33, 2, 9, 40, 41]
    ref, _ = _run(target, prompt, None, max_new_tokens=40)
    out, steps = _run(target, prompt, with_copy(None, max_tokens=8, min_match=1), max_new_tokens=40)
    assert out == ref
    st = summarize(steps, 8)
    assert st.accepted_by_head.get("copy", 0) > 10
    # Every accepted token is copied, so the copy proposer's part of acceptance at each
    # position is all of it, and halves of a run merge back into the whole.
    assert st.copied_acceptance_by_position(8) == pytest.approx(st.acceptance_by_position(8))
    assert sum(st.copied_by_position) == st.accepted_by_head["copy"]
    half = len(steps) // 2
    merged = summarize(steps[:half], 8).merge(summarize(steps[half:], 8))
    assert merged.copied_by_position == st.copied_by_position and merged.accepted_hist == st.accepted_hist
    for s in steps[1:]:
        assert s.copy_nodes == s.drafted
        assert all(e.head in ("copy", "target") for e in s.emitted)
        assert all(r.head == "copy" for r in s.rejected)


@pytest.mark.parametrize("base", ["none", "fixed-tree"])
def test_copy_nodes_keep_sampling_exact(base):
    """Sampling with copy nodes in the tree leaves the output distribution exactly the
    target's: the chi-square test of test_verify (same exact distribution by brute
    force, same significance: a correct engine must give p > 1e-3; that test also shows
    the sample size rejects wrong acceptance rules at p < 1e-6). With min_match=1 the
    prompt's tokens recur after the prefill, so copy nodes are proposed and accepted."""
    from collections import Counter

    from engine.test_verify import (
        BRANCHES,
        CONFIGS,
        N_SAMPLES,
        NEW_TOKENS,
        PASS_P,
        PROMPT,
        VOCAB,
        chi_square_p,
        exact_distribution,
    )

    from helpers import FixedTreeDrafter

    target = tiny_target("llama", vocab=VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, init=0.5, seed=1, eos=1)
    cfg = CONFIGS[1]
    learned = FixedTreeDrafter(VOCAB, BRANCHES) if base == "fixed-tree" else None
    # keep_above=0: the fixed tree's nodes all score log 1, so copied nodes are kept as extras, not in its budget.
    drafter = with_copy(learned, max_tokens=3, min_match=1, keep_above=0.0)
    counts: Counter = Counter()
    copy_nodes = copy_accepted = 0
    for i in range(N_SAMPLES):
        settings = GenerationSettings(max_new_tokens=NEW_TOKENS, seed=i, tree=TreeSettings(total_tokens=12, depth=2),
                                      **cfg)
        steps = list(stream(target, PROMPT, drafter, settings))
        counts[tuple(t for s in steps for t in s.tokens)] += 1
        copy_nodes += sum(s.copy_nodes for s in steps)
        copy_accepted += sum(e.head == "copy" for s in steps for e in s.emitted)
    assert copy_nodes > N_SAMPLES // 2 and copy_accepted > N_SAMPLES // 20, (copy_nodes, copy_accepted)
    p = chi_square_p(counts, exact_distribution(target, **cfg), N_SAMPLES)
    assert p > PASS_P, f"sampling with copy nodes deviates from the target distribution (chi-square p={p:.2e})"


def _drafter_tree():
    """root -> a (p .6) -> b (.5); root -> c (.1); root -> d (.05): scores are log path probabilities."""
    import math

    tree = DraftTree.root_only(4)
    for tok, parent, p in ((10, 0, .6), (11, 1, .5), (20, 0, .1), (30, 0, .05)):
        tree.add(tok, parent, p, tree.scores[parent] + math.log(p), "serial")
    return tree


def test_copied_nodes_share_the_budget_by_probability():
    from gumiho.proposers.selection import keep_best

    tree = _drafter_tree()
    # A likely copy (c = 0.8) below "a b": its first nodes beat the drafter's weak siblings.
    merged = add_chain(tree, [10, 11, 12, 13, 14], copy_prob=0.8)
    assert merged.copied == [False] * 5 + [True] * 3
    # Path probabilities: a .6, b .3, copied .24, .19, .15, c .1, d .05.
    kept = keep_best(merged, budget=4, keep_above=1.0)  # no extras: the 4 best
    assert kept.check() and kept.tokens == [4, 10, 11, 12, 13] and kept.copied == [False] * 3 + [True] * 2
    # Copied nodes at least .18 likely are kept beyond the budget; the budget goes to the best of the rest.
    kept = keep_best(merged, budget=4, keep_above=0.18)
    # Forced: the copied .24 and .19 (and their ancestors a, b, which count in the budget); the budget's
    # other 2 nodes: the copied .15 and c (.1); d (.05) is cut.
    assert kept.check() and kept.tokens == [4, 10, 11, 20, 12, 13, 14]
    assert sum(kept.copied) == 3 and len(kept) - 1 == 6  # 2 copied extras + the budget of 4
    # An unlikely copy (c = .05) loses to every drafter node and is cut first.
    unlikely = keep_best(add_chain(tree, [40, 41], copy_prob=0.05), budget=4, keep_above=0.15)
    assert unlikely.tokens == tree.tokens and not any(unlikely.copied)
    # Within budget, nothing is cut.
    assert keep_best(merged, budget=10).tokens == merged.tokens


def test_copy_proposer_learns_how_often_its_guesses_hold():
    from gumiho.proposers import CopySession

    prop = CopySession(CopySettings(max_tokens=3, min_match=2), [5, 6, 7, 8, 9, 5, 6])
    chain, c0, long = prop.guess()
    assert chain == [7, 8, 9] and not long and 0 < c0 < 1
    for accepted in (True, True, False):
        tree = prop.draft(DraftTree.root_only(6), budget=None)
        assert sum(tree.copied) == 3
        prop.observe([1, 2, 3] if accepted else [])  # all three copied nodes accepted, or none
    _, c1, _ = prop.guess()
    # 6 accepted of 7 reached (3 + 3, then only the first node of the rejected chain was reached).
    acc0, off0 = 1.2, 4.0
    assert abs(c1 - (acc0 + 6) / (off0 + 7)) < 1e-9 and c1 > c0
