"""research/tree_shape.py: its per-position node counts and acc@1 agree with what the
decode loop reports (each step's drafted-node count, and the metrics module's acc@1)."""
import pytest
import tree_shape

from gumiho import GenerationSettings, stream
from gumiho.engine.metrics import summarize
from helpers import OracleDrafter, tiny_target


def test_tree_shape_agrees_with_the_decode_loop():
    target = tiny_target("llama")
    prompt = [5, 9, 13, 2, 7, 31]
    ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=40)) for t in s.tokens]
    oracle = lambda: OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=3)  # noqa: E731
    shape = tree_shape.tree_shape(target, oracle(), [prompt], max_new_tokens=40, depth=7)
    steps = [s for s in stream(target, prompt, oracle(), GenerationSettings(max_new_tokens=40)) if s.step > 0]
    assert shape["verify_steps"] == len(steps) > 3
    assert sum(shape["nodes_by_position"]) == pytest.approx(sum(s.drafted for s in steps) / len(steps), abs=0.04)
    assert shape["acc_at_1"] == round(summarize(steps, 7).acceptance_by_position(1)[0], 2)
    assert 0 < shape["acc_at_1"] < 1  # partial acceptance was exercised


def test_calibration_counts_the_candidates_the_target_judged():
    """A candidate is judged when its parent is the root or accepted; of those, the
    accepted ones are the accepted path."""
    from gumiho.engine.events import StepEvent
    from gumiho.tree import DraftTree

    #        root -> A (0.6) -> C (0.5)
    #             |          -> D (0.2)
    #             -> B (0.3) -> E (0.9)   (B rejected: E is never judged)
    tree = DraftTree.of([9, 1, 2, 3, 4, 5], [-1, 0, 0, 1, 1, 2], [1.0, 0.6, 0.3, 0.5, 0.2, 0.9])
    event = StepEvent(step=1, emitted=[], accepted_length=2, rejected=[], drafted=5, draft_s=0, verify_s=0,
                      elapsed_s=0, tree=tree, accepted_nodes=[1, 3])
    judged = tree_shape.judged_candidates(event)
    assert sorted(judged) == [(1, 0.3, False), (1, 0.6, True), (2, 0.2, False), (2, 0.5, True)]
    cal = tree_shape.calibration(judged)
    assert cal["by_position"] == {1: {"judged": 2, "mean_prob": 0.45, "accepted": 0.5},
                                  2: {"judged": 2, "mean_prob": 0.35, "accepted": 0.5}}
    assert sum(row["judged"] for row in cal["by_probability"].values()) == 4

    # On real decoding: every accepted drafted token was judged and accepted.
    target = tiny_target("llama")
    prompt = [5, 9, 13, 2, 7, 31]
    ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=40)) for t in s.tokens]
    oracle = lambda: OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=3)  # noqa: E731
    shape = tree_shape.tree_shape(target, oracle(), [prompt], max_new_tokens=40, depth=7, with_calibration=True)
    steps = [s for s in stream(target, prompt, oracle(), GenerationSettings(max_new_tokens=40), keep_trees=True)
             if s.step > 0]
    by_pos = shape["calibration"]["by_position"]
    accepted = sum(round(row["judged"] * row["accepted"]) for row in by_pos.values())
    assert accepted == sum(s.accepted_length for s in steps) > 0
    assert by_pos[1]["judged"] == sum(s.tree.parents.count(0) for s in steps)  # every child of a root
