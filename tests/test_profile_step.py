"""scripts/profile_step.py: the steps it runs by hand (to time each part) are the
decode loop's steps."""
import gumiho as g
from gumiho import GenerationSettings, TreeSettings, stream

from helpers import OracleDrafter, load_script, tiny_target


def test_hand_run_steps_add_the_tokens_the_decode_loop_adds():
    profile_step = load_script("profile_step")
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
