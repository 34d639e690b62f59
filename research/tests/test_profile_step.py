"""research/profile_step.py: the steps it runs by hand (to time each part) are the
decode loop's steps."""
import profile_step

import gumiho as g
from gumiho import GenerationSettings, TreeSettings, stream
from helpers import OracleDrafter, tiny_target


def test_hand_run_steps_add_the_tokens_the_decode_loop_adds():
    target = tiny_target("llama", seed=3)
    prompt = [5, 17, 33, 2, 9]
    ref = [t for s in stream(target, prompt, None, GenerationSettings(max_new_tokens=60)) for t in s.tokens]
    settings = TreeSettings.for_device(target.device)

    def oracle():  # proposes the target's own continuation, some positions corrupted
        return OracleDrafter(prompt + ref + [0] * 64, vocab=96, corrupt=0.25, seed=1)

    loop = list(stream(target, prompt, oracle(), GenerationSettings(max_new_tokens=60, tree=settings)))
    steps = min(12, len(loop) - 2)  # the last step may be cut at the end of the answer
    added = []
    times, sizes = profile_step.spec_steps(g, target, oracle(), prompt, steps, settings, added)
    assert added == [len(s.tokens) for s in loop[1:steps + 1]]
    assert sizes == [s.drafted + 1 for s in loop[1:steps + 1]]
    assert max(added) > 2  # accepted paths: the extends ran over several positions
    assert all(len(times[part]) == steps for part in profile_step.PARTS)


def test_profile_step_times_forwards_with_and_without_the_features():
    """research/profile_step.py --feature-layers: a fused random drafter's steps, and the
    target's forwards timed both ways."""
    target = tiny_target("llama", hidden=32, layers=4, heads=4, kv_heads=2, seed=2)  # default feature layers (1, 2)
    drafter = profile_step.make_drafter(g, target, "gumiho", draft_vocab=64, feature_layers="default")
    assert profile_step.features_kw(drafter) == {"feature_layers": (1, 2)}
    settings = TreeSettings(total_tokens=5, depth=3, serial_top_k=2, full_tree=False)
    times, sizes = profile_step.spec_steps(g, target, drafter, [5, 17, 33, 2, 9], 3, settings)
    assert len(times["extend"]) == 3 and min(sizes) > 1
    times, tree_size = profile_step.feature_times(g, target, drafter, [5, 17, 33, 2, 9], settings, (1, 2), rounds=2)
    assert set(times) == {("one", False), ("one", True), ("tree", False), ("tree", True)} and tree_size == 6
    assert all(t > 0 for t in times.values())
