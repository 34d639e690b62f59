"""Cost-aware trees: the node-count rule, the cost measurement, and that sizing trees
by cost keeps decoding exact."""
import dataclasses
import math

import pytest
import torch

from gumiho import Drafter, DrafterConfig, GenerationSettings, GumihoError, TreeSettings, stream
from gumiho.engine.verifycost import (
    VerifyCost,
    best_node_count,
    measure_verify_cost,
    non_decreasing,
    tokens_needed,
    verify_cost_for,
)
from gumiho.proposers import Budget, DraftSession
from helpers import tiny_target


def test_best_node_count_maximizes_expected_tokens_per_second():
    # Flat cost: every node with any chance of acceptance is free, so all are verified.
    assert best_node_count([0.5, 0.1, 0.01], VerifyCost((1.0, 1.0, 1.0, 1.0))) == 3
    # Cost linear in tokens (as if each token were its own forward): no node pays, since
    # a node adds q < 1 expected tokens for one more token's cost.
    assert best_node_count([0.9, 0.8], VerifyCost((1.0, 2.0, 3.0))) == 0
    # A step in the cost after 3 tokens: 2 nodes give (1 + 0.9) / 1.0 = 1.9 tokens per
    # second, 3 give (1 + 0.95) / 1.1 = 1.77 ...
    assert best_node_count([0.6, 0.3, 0.05], VerifyCost((1.0, 1.0, 1.0, 1.1))) == 2
    # ... unless the third node is likely enough: (1 + 2.7) / 1.1 = 3.36 > 2.8.
    assert best_node_count([0.9, 0.9, 0.9], VerifyCost((1.0, 1.0, 1.0, 1.1))) == 3
    # A tie goes to the smaller tree: (1 + 0.5) / 1.5 == 1 / 1.0.
    assert best_node_count([0.5], VerifyCost((1.0, 1.5))) == 0
    # Extra tokens (the full-tree extension) are paid for at every n.
    assert best_node_count([0.6, 0.3, 0.2], VerifyCost((1.0, 1.0, 1.0, 1.5, 1.5, 1.5)), extra_tokens=2) == 3
    # A one-token forward slower than a small tree's (as on AVX-512 CPUs): a tree pays even for a weak drafter.
    assert best_node_count([0.01, 0.01], VerifyCost((1.2, 1.3, 1.0))) == 2
    # Beyond the measured sizes the cost grows in proportion.
    assert VerifyCost((1.0, 2.0)).of(4) == 4.0


def test_non_decreasing_is_the_least_squares_monotone_fit():
    assert non_decreasing([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    # A dip is pooled with what it undercuts: (5 + 3) / 2 = 4.
    assert non_decreasing([1.0, 5.0, 3.0, 6.0]) == [1.0, 4.0, 4.0, 6.0]
    # Pools grow backwards while they still undercut: (4 + 4 + 1) / 3 = 3, which stays above 2 ...
    assert non_decreasing([2.0, 4.0, 4.0, 1.0]) == [2.0, 3.0, 3.0, 3.0]
    # ... and here reaches the first value too: (2.5 + 4 + 4 + 1) / 4.
    assert non_decreasing([3.5, 4.0, 4.0, 1.0]) == [3.125] * 4
    # A slow one-token forward (AVX-512 shape) pools with the cheap few-token sizes.
    fit = non_decreasing([44.0, 46.0, 43.0, 42.0, 41.0, 44.0, 47.0, 48.0, 46.0, 51.0])
    assert fit[:5] == [pytest.approx(43.2)] * 5 and fit[5] == 44.0
    assert fit[6:9] == [pytest.approx(47.0)] * 3 and fit[9] == 51.0
    assert all(a <= b for a, b in zip(fit, fit[1:]))


def test_measure_verify_cost_and_its_cache_on_the_target():
    target = tiny_target("llama", ctx=64)
    cost = measure_verify_cost(target, 6, rounds=2)
    assert cost.max_tokens == 6 and all(s > 0 for s in cost.seconds)
    assert list(cost.seconds) == non_decreasing(list(cost.measured))
    assert cost.relative()[0] == 1.0
    assert target.verify_cost is None  # measuring alone stores nothing
    kept = verify_cost_for(target, 5)
    assert target.verify_cost is kept and kept.max_tokens == 5
    assert verify_cost_for(target, 3) is kept  # covered: not measured again
    bigger = verify_cost_for(target, 9)
    assert bigger.max_tokens == 9 and target.verify_cost is bigger
    # A window too short for the default context still measures (after a shorter one).
    short = tiny_target("llama", ctx=16)
    assert measure_verify_cost(short, 8, rounds=1).max_tokens == 8


def _session_after_prompt(target, drafter, prompt):
    """A drafting session fed with the target's real hidden states of ``prompt``."""
    with torch.inference_mode():
        out = target.model.base_model(input_ids=torch.tensor([prompt]))
        session = DraftSession(drafter)
        session.extend(out.last_hidden_state[0][:-1], torch.tensor(prompt[1:]))
    return session


@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_cost_aware_trees_are_the_best_nodes_of_the_fixed_tree(kind):
    target = tiny_target("llama", seed=2)
    torch.manual_seed(3)
    # The session below reads the target's final-norm states: eagle3 without fused layers reads those.
    drafter = Drafter(DrafterConfig.for_target(target.config, kind, feature_layers=None)).eval().attach_target(
        target.model)
    prompt = [5, 17, 33, 2, 9, 41, 7]
    fixed = TreeSettings(total_tokens=9, depth=4, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree=False,
                         full_tree_tokens=0)
    aware = dataclasses.replace(fixed, cost_aware=True)
    session = _session_after_prompt(target, drafter, prompt)
    with torch.inference_mode():
        full = session.propose(prompt[-1], Budget(fixed))
        assert len(full) == 10
        # Free up to 5 tokens, then each token dearer than any node can repay.
        step = VerifyCost(tuple([1.0] * 5 + [10.0] * 5))
        cut = session.propose(prompt[-1], Budget(aware, verify_cost=step))
        # Nothing pays when every token costs a whole forward.
        none = session.propose(prompt[-1], Budget(aware, verify_cost=VerifyCost(tuple(float(n) for n in range(1, 11)))))
        flat = session.propose(prompt[-1], Budget(aware, verify_cost=VerifyCost(tuple([1.0] * 10))))
    assert len(none) == 1
    assert flat.tokens == full.tokens and flat.parents == full.parents
    assert len(cut) == 5
    # The cut tree is the 4 best-scored nodes of the full one, as a well-formed tree.
    cut.check()
    best = sorted(range(1, len(full)), key=lambda i: (-full.scores[i], i))[:4]
    assert sorted((full.tokens[i], full.depths[i], round(full.scores[i], 5)) for i in best) == \
        sorted((cut.tokens[i], cut.depths[i], round(cut.scores[i], 5)) for i in range(1, len(cut)))
    # The expected accepted length the rule used is the sum of the kept path probabilities.
    assert math.isclose(sum(math.exp(s) for s in cut.scores[1:]), sum(math.exp(full.scores[i]) for i in best))


@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_cost_aware_decoding_matches_vanilla(kind):
    target = tiny_target("llama", seed=4)
    torch.manual_seed(5)
    drafter = Drafter(DrafterConfig.for_target(target.config, kind)).eval().attach_target(target.model)
    tree = TreeSettings(total_tokens=8, depth=4, serial_top_k=3, mlp_top_k=2, mlp_keep=3, full_tree=False,
                        full_tree_tokens=0, cost_aware=True)
    # Free up to 4 tokens: every step verifies exactly 3 drafted nodes (or fewer near the end).
    target.verify_cost = VerifyCost(tuple([1.0] * 4 + [10.0] * 5))
    for prompt in ([5, 17, 33, 2, 9], [40, 3, 3, 81, 12, 60, 2, 2, 7]):
        ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=30)) for t in s.tokens]
        steps = list(stream(target, prompt, drafter, GenerationSettings(max_new_tokens=30, tree=tree)))
        assert [t for s in steps for t in s.tokens] == ref
        assert {s.drafted for s in steps if s.step > 0} == {3}


def test_stream_measures_the_cost_once_before_the_clock():
    target = tiny_target("llama", seed=6)
    drafter = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    tree = TreeSettings(total_tokens=6, depth=3, serial_top_k=2, mlp_top_k=2, mlp_keep=2, full_tree=True,
                        full_tree_tokens=2, cost_aware=True)
    assert tokens_needed(tree) == 9
    list(stream(target, [5, 6, 7], drafter, GenerationSettings(max_new_tokens=4, tree=tree)))
    cost = target.verify_cost
    assert cost is not None and cost.max_tokens == 9
    list(stream(target, [5, 6, 7], drafter, GenerationSettings(max_new_tokens=4, tree=tree)))
    assert target.verify_cost is cost
    # Vanilla decoding and fixed trees never measure.
    fresh = tiny_target("llama", seed=6)
    list(stream(fresh, [5, 6, 7], None, GenerationSettings(max_new_tokens=4, tree=tree)))
    list(stream(fresh, [5, 6, 7], drafter, GenerationSettings(
        max_new_tokens=4, tree=dataclasses.replace(tree, cost_aware=False))))
    assert fresh.verify_cost is None


def test_cost_aware_must_be_a_bool():
    with pytest.raises(GumihoError, match="cost_aware must be True or False"):
        TreeSettings(cost_aware="yes").validate()
    assert TreeSettings(cost_aware=True).validate().cost_aware is True
