"""The acceptance test of every checked node, as the step events carry it, and the
losslessness experiment built on it (gumiho.lab.lossless, with the rules of gumiho.lab.rules).

The records must say what the rule did: replaying a step from its checks alone
(each check's draw against its acceptance probability) gives the engine's path,
the residual is the distribution the bonus was drawn from, and recording changes
no sample. The experiment must pass the engine's rule and fail the wrong ones.
"""
import threading

import pytest
import torch

from gumiho import (
    Drafter,
    DrafterConfig,
    GenerationSettings,
    GumihoError,
    TreeSettings,
    chi_square_homogeneity,
    generate,
    lossless_check,
    stream,
)
from gumiho.engine.acceptance import accept_greedy, accept_sampling, sampled_check
from gumiho.engine.decode import SharedPrompt
from gumiho.engine.events import RESIDUAL_TOP
from gumiho.lab.lossless import chi2_sf
from gumiho.lab.rules import SAMPLING_RULES
from gumiho.tree import DraftTree
from helpers import FixedTreeDrafter, OracleDrafter, tiny_target

VOCAB, EOS = 6, 1
PROMPT = [3, 4, 2, 5]
BRANCHES = [[3, 0, 2], [0, 3, 5]]  # three children at depth 1, three below each
TREE = TreeSettings(total_tokens=12, depth=2)


@pytest.fixture(scope="module")
def small():
    # The target of tests/engine/test_verify.py: spread next-token distributions over 6 tokens.
    return tiny_target("llama", vocab=VOCAB, hidden=16, layers=1, heads=2, kv_heads=1, init=0.5, seed=1, eos=EOS)


@pytest.fixture(scope="module")
def wide():
    """A 96-token target and a random-weight drafter: unequal draft probabilities,
    so the children's order and q(c) vary from node to node."""
    target = tiny_target("llama", vocab=96, init=0.5, seed=3)
    torch.manual_seed(1)
    drafter = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    return target, drafter


def replay(checks) -> tuple[list[int], int]:
    """The walk the checks describe, from their draws alone: an accepted check moves
    to its node. Returns the accepted nodes and the node where the walk stopped."""
    node, path = 0, []
    for c in checks:
        assert c.parent == node  # every check is a child of where the walk is
        if c.uniform < c.accept_prob:
            path.append(c.node)
            node = c.node
    return path, node


def assert_sampling_step(event, children_order=True):
    """Every invariant of one sampling step's records (event from stream(keep_trees=True, records=True))."""
    tree, checks, res = event.tree, event.checks, event.residual
    children = tree.children()
    for c in checks:
        assert c.rule_q == 1.0 and c.uniform is not None
        assert c.accepted == (c.uniform < c.accept_prob)
        assert c.accept_prob == pytest.approx(min(1.0, c.target_prob / c.rule_q), rel=1e-12, abs=1e-15)
        assert 0.0 <= c.target_prob <= 1.0 + 1e-6
        assert (c.token, c.depth, c.draft_prob) == (tree.tokens[c.node], tree.depths[c.node], tree.probs[c.node])
    # Along one parent the siblings come in children() order, and only the last may be accepted.
    by_parent: dict[int, list] = {}
    for c in checks:
        by_parent.setdefault(c.parent, []).append(c)
    for parent, group in by_parent.items():
        if children_order:
            assert [c.node for c in group] == children[parent][:len(group)]
        assert not any(c.accepted for c in group[:-1])
    # Replaying the draws gives the engine's path, written and cut, and its break.
    path, stop_node = replay(checks)
    assert path == event.accepted_nodes + event.cut_nodes
    assert res is not None and res.node == stop_node
    # The children tried at the break were all rejected, and every one of them was tried.
    at_break = by_parent.get(stop_node, [])
    assert not any(c.accepted for c in at_break)
    assert [c.node for c in at_break] == children[stop_node]
    # The residual: a distribution with no mass on the rejected children, the bonus drawn from it.
    probs = [p for _, p in res.top]
    assert all(p > 0 for p in probs) and probs == sorted(probs, reverse=True)
    assert len(res.top) <= RESIDUAL_TOP and res.covered == pytest.approx(sum(probs))
    assert res.covered <= 1 + 1e-6
    assert not {c.token for c in at_break} & {t for t, _ in res.top}
    assert res.resampled_token == event.target_choices[-1]
    if len(event.emitted) == event.accepted_length + 1:  # not cut: the bonus was written last
        assert event.emitted[-1].token == res.resampled_token


def test_sampling_step_records_are_consistent_and_replay(small):
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    steps_seen = accepted_seen = rejected_seen = 0
    for seed in range(40):
        for cfg in (dict(temperature=0.9), dict(temperature=1.3, top_p=0.9, top_k=4)):
            settings = GenerationSettings(max_new_tokens=8, seed=seed, tree=TREE, **cfg)
            steps = list(stream(small, PROMPT, drafter, settings, keep_trees=True, records=True))
            assert steps[0].checks == [] and steps[0].residual is None  # the prefill tests nothing
            for event in steps[1:]:
                assert_sampling_step(event)
                # 6 tokens: the residual's top holds all of it.
                assert event.residual.covered == pytest.approx(1.0, abs=1e-5)
                assert dict(event.residual.top)[event.residual.resampled_token] > 0
                steps_seen += 1
                accepted_seen += sum(c.accepted for c in event.checks)
                rejected_seen += sum(not c.accepted for c in event.checks)
    assert steps_seen > 100 and accepted_seen > 50 and rejected_seen > 100


def test_sampling_records_with_a_real_drafter(wide):
    target, drafter = wide
    tree = TreeSettings(total_tokens=8, depth=3, serial_top_k=3)
    n = 0
    for seed in range(6):
        settings = GenerationSettings(max_new_tokens=12, temperature=1.5, seed=seed, tree=tree)
        for event in list(stream(target, [5, 17, 33, 2, 9], drafter, settings, keep_trees=True, records=True))[1:]:
            assert_sampling_step(event)
            assert len(event.residual.top) == RESIDUAL_TOP and event.residual.covered < 1
            n += len(event.checks)
    assert n > 30


def test_a_cut_step_still_reports_every_check(small):
    """A step whose accepted path the token limit cuts lists the checks that accepted
    the cut nodes: the records are the rule's decisions, not what was written."""
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    cut = 0
    for seed in range(60):
        settings = GenerationSettings(max_new_tokens=2, temperature=0.9, seed=seed, tree=TREE)
        last = list(stream(small, PROMPT, drafter, settings, keep_trees=True, records=True))[-1]
        if last.cut_nodes:
            cut += 1
            assert {c.node for c in last.checks if c.accepted} == set(last.accepted_nodes + last.cut_nodes)
            assert_sampling_step(last)
    assert cut > 5


def _tree(spec, V):
    """spec: (parent, token) per drafted node, parents-first; falling draft probabilities."""
    tree = DraftTree.root_only(0)
    for k, (parent, tok) in enumerate(spec):
        tree.add(tok, parent, 0.9 - 0.1 * k, 0.0, "serial")
    return tree.check()


@pytest.mark.parametrize("V", [7, 40])
def test_accept_sampling_residual_is_the_full_renormalised_remainder(V):
    """Rebuilt independently from the target's rows and the rejected children: the
    residual sums to 1, has no mass on the rejected children, and is what the record
    holds (all of it for 7 tokens, its top 8 for 40); each check's target_prob is
    p(c) over the mass the earlier rejections left."""
    g = torch.Generator().manual_seed(7)
    tree = _tree([(0, 3), (0, 5), (0, 1), (1, 2), (1, 6), (1, 4)], V)
    children = tree.children()
    for trial in range(300):
        probs = torch.rand(len(tree), V, generator=g) ** 3
        probs[0, 5] = 0.0 if trial % 3 == 0 else probs[0, 5]  # a child of probability 0 sometimes
        probs = probs / probs.sum(-1, keepdim=True)
        acc = accept_sampling(tree, probs, g, records=True)
        removed: dict[int, float] = {}
        for c in acc.checks:
            left = 1.0 - sum(float(probs[c.parent, t]) for t in removed.get(c.parent, []))
            assert c.target_prob == pytest.approx(float(probs[c.parent, c.token]) / left, rel=1e-5, abs=1e-7)
            if not c.accepted:
                removed.setdefault(c.parent, []).append(c.token)
        res = acc.residual
        full = probs[res.node].clone().double()
        for c in children[res.node]:
            full[tree.tokens[c]] = 0.0
        full /= full.sum()
        assert float(full.sum()) == pytest.approx(1.0)
        assert all(float(full[tree.tokens[c]]) == 0 for c in children[res.node])
        assert float(full[res.resampled_token]) > 0
        assert res.resampled_token == acc.bonus
        best = torch.topk(full, min(RESIDUAL_TOP, int((full > 0).sum())))
        assert [t for t, _ in res.top] == best.indices.tolist()
        assert [p for _, p in res.top] == pytest.approx(best.values.tolist(), rel=1e-5)
        if V <= RESIDUAL_TOP:
            assert res.covered == pytest.approx(1.0, abs=1e-6)


def test_the_record_states_the_decision_made_at_the_boundary():
    """The exact rule decides u * mass < p(c) (exact in double precision for float32
    inputs); the record's accept_prob is the quotient p(c) / mass, which rounding could
    put on the other side of u. The record then moves it by the least amount, so that
    accepted == (uniform < accept_prob) always holds."""
    tree = DraftTree.of([0, 4], [-1, 0], [1.0, 0.7])
    ordinary = sampled_check(tree, 1, 0, 1.0, 0.3, 0.2, True)
    assert ordinary.accept_prob == 0.3 and ordinary.accepted
    on_boundary = sampled_check(tree, 1, 0, 1.0, 0.5, 0.5, True)  # the quotient rounded down onto u
    assert on_boundary.uniform < on_boundary.accept_prob == pytest.approx(0.5, abs=1e-15)
    below = sampled_check(tree, 1, 0, 1.0, 0.5, 0.4999999, False)  # rounded up past u
    assert not below.uniform < below.accept_prob and below.accept_prob == pytest.approx(0.5, abs=1e-6)
    q_zero = sampled_check(tree, 1, 0, 0.0, 0.2, 0.9, True)  # q = 0 where p > 0: ratio infinite
    assert q_zero.accept_prob == 1.0


def test_greedy_records(wide):
    """Greedy: a child is accepted iff it is the target's argmax at its parent; no draws,
    no residual; the checks replay the walk; target_prob is the parent row's softmax."""
    target, _ = wide
    prompt = [5, 17, 33, 2, 9]
    ref = [t for e in stream(target, prompt, None, GenerationSettings(max_new_tokens=40)) for t in e.tokens]
    n_accepted = n_rejected = 0
    for seed in range(8):
        drafter = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, siblings=2, seed=seed)
        for event in list(stream(target, prompt, drafter, GenerationSettings(max_new_tokens=40),
                                 keep_trees=True, records=True))[1:]:
            assert event.residual is None
            for c in event.checks:
                assert c.uniform is None and c.rule_q == 1.0 and c.accept_prob == float(c.accepted)
                assert c.accepted == (c.token == event.target_choices[c.depth - 1])
                assert 0 < c.target_prob <= 1
            path, node = [], 0
            for c in event.checks:  # replay: move on an accepted check
                assert c.parent == node
                if c.accepted:
                    path.append(c.node)
                    node = c.node
            assert path == event.accepted_nodes + event.cut_nodes
            # The argmax is the most likely token: an accepted child beats its rejected siblings.
            for c in event.checks:
                if c.accepted:
                    assert all(c.target_prob >= r.target_prob for r in event.checks
                               if r.parent == c.parent and not r.accepted)
            n_accepted += sum(c.accepted for c in event.checks)
            n_rejected += sum(not c.accepted for c in event.checks)
    assert n_accepted > 30 and n_rejected > 30


def test_accept_greedy_target_prob_is_the_softmax():
    g = torch.Generator().manual_seed(3)
    tree = _tree([(0, 3), (0, 5), (0, 1), (1, 2), (1, 6)], 9)
    for _ in range(50):
        logits = torch.randn(len(tree), 9, generator=g) * 2
        logits[0, 3] += 3 * float(torch.rand((), generator=g))  # token 3 is sometimes the argmax
        acc = accept_greedy(tree, logits, records=True)
        for c in acc.checks:
            assert c.target_prob == pytest.approx(float(logits[c.parent].softmax(-1)[c.token]), rel=1e-5)
            assert c.accepted == (c.token == int(logits[c.parent].argmax()))
        assert acc.residual is None


def test_recording_changes_no_sample(small, wide):
    """The same seed gives the same tokens, steps and draws with the records off (the
    default) and on, greedy and sampling; handing the loop the exact rule is the
    default. (That these tokens are the ones the engine wrote before the records existed
    was checked by hand, on saved outputs.)"""
    target, drafter = wide
    for tgt, d, prompt, tree in ((small, FixedTreeDrafter(VOCAB, BRANCHES), PROMPT, TREE),
                                 (target, drafter, [5, 17, 33], TreeSettings(total_tokens=8, depth=3))):
        for seed in range(3):
            temperature = 0.0 if seed == 2 else 0.8
            settings = GenerationSettings(temperature=temperature, max_new_tokens=16, seed=seed, tree=tree)
            off = list(stream(tgt, prompt, d, settings))
            on, again = list(stream(tgt, prompt, d, settings, records=True)), list(stream(tgt, prompt, d, settings,
                                                                                          records=True))
            exact = list(stream(tgt, prompt, d, settings, acceptance_rule=accept_sampling, records=True))
            assert [s.tokens for s in off] == [s.tokens for s in on] == [s.tokens for s in exact]
            assert [s.accepted_nodes for s in off] == [s.accepted_nodes for s in on]
            assert [s.checks for s in on] == [s.checks for s in again] == [s.checks for s in exact]
            assert [s.residual for s in on] == [s.residual for s in exact]
            # Off, nothing is recorded; on, every verify step that drafted has its checks.
            assert all(s.checks == [] and s.residual is None for s in off)
            assert all(s.checks for s in on[1:] if s.drafted)


def test_shared_prompt_writes_what_stream_writes(small, wide, monkeypatch):
    """One prefill for many generations (the experiment's shortcut) changes no token."""
    import gumiho.engine.decode

    target, drafter = wide
    prefills = []
    prefill = gumiho.engine.decode.prefill
    monkeypatch.setattr(gumiho.engine.decode, "prefill", lambda run: prefills.append(run) or prefill(run))
    for tgt, d, prompt, tree in ((small, FixedTreeDrafter(VOCAB, BRANCHES), PROMPT, TREE),
                                 (target, drafter, [5, 17, 33, 2], TreeSettings(total_tokens=8, depth=3)),
                                 (target, None, [5, 17, 33, 2], None)):
        settings = GenerationSettings(max_new_tokens=7, temperature=1.1, tree=tree)
        shared = SharedPrompt(tgt, prompt, d, settings)
        for seed in range(5):
            ours = [e.tokens for e in shared.stream(seed)]
            assert not prefills  # the prompt's forward was shared, not run again
            ref = [e.tokens for e in stream(tgt, prompt, d, GenerationSettings(max_new_tokens=7, temperature=1.1,
                                                                                  seed=seed, tree=tree))]
            assert ours == ref
            prefills.clear()
        # An abandoned generation leaves the next one unharmed.
        it = shared.stream(11)
        next(it), next(it)
        assert [e.tokens for e in shared.stream(3)] == [
            e.tokens for e in stream(tgt, prompt, d, GenerationSettings(max_new_tokens=7, temperature=1.1, seed=3,
                                                                        tree=tree))]
        prefills.clear()


def test_wrong_rules_record_what_they_did(small):
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    for seed in range(10):
        settings = GenerationSettings(max_new_tokens=6, temperature=0.9, seed=seed, tree=TREE)
        for event in list(stream(small, PROMPT, drafter, settings, keep_trees=True,
                                 acceptance_rule=SAMPLING_RULES["keep_drafts"], records=True))[1:]:
            children = event.tree.children()
            # Every drafted level kept: the first child at each depth, accepted with probability 1.
            assert all(c.accepted and c.accept_prob == 1.0 for c in event.checks)
            assert [c.node for c in event.checks] == event.tree.path_to(event.checks[-1].node)
            assert all(c.node == children[c.parent][0] for c in event.checks)
            assert event.residual.node == event.checks[-1].node
        for event in list(stream(small, PROMPT, drafter, settings, keep_trees=True,
                                 acceptance_rule=SAMPLING_RULES["drafter_q"], records=True))[1:]:
            for c in event.checks:
                assert c.rule_q == c.draft_prob == pytest.approx(1 / 3)
                assert c.accept_prob == pytest.approx(min(1.0, c.target_prob / c.rule_q))
                assert c.accepted == (c.uniform < c.accept_prob)
            path, node = replay(event.checks)
            assert path == event.accepted_nodes + event.cut_nodes and event.residual.node == node


def test_rule_names_are_checked(small):
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    # The loop takes a rule as a callable, not by name: the names are the lab's.
    with pytest.raises(GumihoError, match="acceptance_rule must be a function"):
        generate(small, prompt_ids=PROMPT, drafter=drafter, temperature=0.9, acceptance_rule="exact")
    with pytest.raises(GumihoError, match="'accept_keep_drafts' is a sampling rule.*temperature above 0"):
        generate(small, prompt_ids=PROMPT, drafter=drafter, acceptance_rule=SAMPLING_RULES["keep_drafts"])
    with pytest.raises(GumihoError, match="exact, keep_drafts, drafter_q"):
        lossless_check(small, PROMPT, drafter, 0.9, rule="exactly")
    with pytest.raises(GumihoError, match="Unknown acceptance rule"):
        lossless_check(small, PROMPT, drafter, 0.9, rule="nope")
    with pytest.raises(GumihoError, match="temperature above 0"):
        lossless_check(small, PROMPT, drafter, 0.0)
    # One token is the prefill's, drawn before any draft: a test of it could not fail.
    with pytest.raises(GumihoError, match="at least 2 first tokens: the first token comes from the prefill"):
        lossless_check(small, PROMPT, drafter, 0.9, tokens=1)
    assert list(SAMPLING_RULES) == ["exact", "keep_drafts", "drafter_q"]


# -- the experiment --------------------------------------------------------------------------------


def test_chi2_tail_known_values():
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(9.21, 2) == pytest.approx(0.01, abs=2e-4)
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(2.0, 2) == pytest.approx(torch.exp(torch.tensor(-1.0)).item())  # dof 2: exp(-x/2)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(5.0, 0) == 1.0


def test_homogeneity_pools_rare_sequences():
    # Expected counts: half of each column. A, B are large; c1..c4 (1-3 each) are rare.
    a = {"A": 50, "B": 50, "c1": 1, "c2": 2, "c3": 1}
    b = {"A": 40, "B": 60, "c2": 1, "c4": 2}
    t = chi_square_homogeneity(a, b)
    assert t.pooled == 4
    # The pooled cell (4 vs 3, expected 3.5 each) is still below 5: it joins the smaller of A, B.
    cells = [(54, 43), (50, 60)]
    ra, rb = 104, 103
    n = ra + rb
    stat = sum((o - r * (x + y) / n) ** 2 / (r * (x + y) / n) for x, y in cells for o, r in ((x, ra), (y, rb)))
    assert t.dof == 1 and t.chi2 == pytest.approx(stat) and t.p_value == pytest.approx(chi2_sf(stat, 1))
    # Enough rare sequences make an "other" cell of their own.
    a2 = {"A": 50, **{f"r{i}": 1 for i in range(12)}}
    b2 = {"A": 55, **{f"s{i}": 1 for i in range(10)}}
    t2 = chi_square_homogeneity(a2, b2)
    assert t2.pooled == 22 and t2.dof == 1
    # Nothing to test: one cell, or an empty sample.
    assert chi_square_homogeneity({"A": 20}, {"A": 30}).dof == 0
    assert chi_square_homogeneity({"A": 20}, {}).p_value == 1.0
    same = chi_square_homogeneity({"A": 30, "B": 20}, {"A": 30, "B": 20})
    assert same.chi2 == 0 and same.p_value == 1.0


def test_lossless_check_passes_the_exact_rule_and_fails_the_wrong_ones(small):
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    seen = []
    exact = lossless_check(small, PROMPT, drafter, 0.9, samples=300, tokens=2, seed=0, tree=TREE,
                           progress=lambda done, total: seen.append((done, total)))
    assert exact.p_value > 0.01 and exact.dof > 5, exact
    assert seen[-1] == (600, 600) and len(seen) == 600
    assert sum(exact.vanilla.values()) == sum(exact.speculative.values()) == 300
    assert all(len(s) == 2 or s[-1] == EOS for s in exact.vanilla)
    assert exact.verdict().startswith("The two samples are consistent with one distribution (p = ")
    for rule in ("keep_drafts", "drafter_q"):
        wrong = lossless_check(small, PROMPT, drafter, 0.9, samples=300, tokens=2, rule=rule, seed=0, tree=TREE)
        assert wrong.p_value < 1e-3, wrong
        assert wrong.rule == rule and wrong.verdict().startswith("The two samples differ: p = ")
        assert repr(rule) not in wrong.verdict() and "wrong rule" in wrong.verdict()
    # The arms draw with distinct seeds: same settings, different samples.
    assert exact.vanilla != exact.speculative


def test_lossless_check_stops_with_even_arms(small):
    drafter = FixedTreeDrafter(VOCAB, BRANCHES)
    stop = threading.Event()

    def progress(done, total):
        if done == 20:
            stop.set()

    result = lossless_check(small, PROMPT, drafter, 0.9, samples=100, tokens=2, tree=TREE, progress=progress,
                            stop=stop)
    assert result.stopped and result.samples == 10
    assert sum(result.vanilla.values()) == sum(result.speculative.values()) == 10
