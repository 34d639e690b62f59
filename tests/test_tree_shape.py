"""scripts/tree_shape.py: its per-position node counts and acc@1 agree with what the
decode loop reports (each step's drafted-node count, and the metrics module's acc@1)."""
import pytest

from gumiho import GenerationSettings, stream
from gumiho.metrics import summarize

from helpers import OracleDrafter, load_script, tiny_target


def test_tree_shape_agrees_with_the_decode_loop():
    target = tiny_target("llama")
    prompt = [5, 9, 13, 2, 7, 31]
    ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=40)) for t in s.tokens]
    oracle = lambda: OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.3, seed=3)  # noqa: E731
    shape = load_script("tree_shape").tree_shape(target, oracle(), [prompt], max_new_tokens=40, depth=7)
    steps = [s for s in stream(target, prompt, oracle(), GenerationSettings(max_new_tokens=40)) if s.step > 0]
    assert shape["verify_steps"] == len(steps) > 3
    assert sum(shape["nodes_by_position"]) == pytest.approx(sum(s.drafted for s in steps) / len(steps), abs=0.04)
    assert shape["acc_at_1"] == round(summarize(steps, 7).acceptance_by_position(1)[0], 2)
    assert 0 < shape["acc_at_1"] < 1  # partial acceptance was exercised
