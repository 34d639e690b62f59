"""Greedy speculative decoding must emit exactly the tokens vanilla decoding emits."""
import pytest
import torch

from gumiho import Drafter, DrafterConfig, GenerationSettings, TreeSettings, stream
from gumiho.engine.metrics import summarize
from helpers import OracleDrafter, tiny_target


def run(target, prompt, drafter=None, **kw):
    steps = list(stream(target, prompt, drafter, GenerationSettings(**kw)))
    return [t for s in steps for t in s.tokens], steps


def prompts(n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab, (int(torch.randint(3, 20, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("shape", [dict(hidden=32, heads=4, kv_heads=2, layers=2),
                                   dict(hidden=48, heads=6, kv_heads=6, layers=3)])
def test_oracle_drafter_matches_vanilla(family, shape):
    target = tiny_target(family, **shape)
    total_accepted = 0
    for i, prompt in enumerate(prompts(6, 96, seed=len(family) * 7 + shape["layers"])):
        ref, _ = run(target, prompt, max_new_tokens=40)
        drafter = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.25, seed=i)
        out, steps = run(target, prompt, drafter, max_new_tokens=40)
        assert out == ref
        total_accepted += sum(s.accepted_length for s in steps)
        if len(ref) > 8:
            assert summarize(steps, 7).tau > 1.0
    assert total_accepted > 50  # long accepted paths were really exercised


def test_vanilla_matches_hf_generate():
    target = tiny_target("llama")
    for prompt in prompts(4, 96, seed=3):
        ours, _ = run(target, prompt, max_new_tokens=30)
        hf = target.model.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False,
                                   eos_token_id=1, pad_token_id=0)[0, len(prompt):].tolist()
        assert ours == hf


def test_eos_inside_accepted_draft_and_length_edge():
    target = tiny_target("llama", seed=5)
    prompt = [5, 17, 33, 2, 9]
    free, _ = run(target, prompt, max_new_tokens=60)
    # Make a token from the middle of the continuation the EOS: vanilla stops there.
    eos_tok = free[12]
    target.model.generation_config.eos_token_id = eos_tok
    target.model.config.eos_token_id = eos_tok
    ref, ref_steps = run(target, prompt, max_new_tokens=60)
    assert ref[-1] == eos_tok and len(ref) <= 13 and ref_steps[-1].finish_reason == "eos"
    hit_inside = False
    for seed in range(8):
        drafter = OracleDrafter(prompt + free + [0] * 16, vocab=96, corrupt=0.0, siblings=1, seed=seed)
        out, steps = run(target, prompt, drafter, max_new_tokens=60)
        assert out == ref and steps[-1].finish_reason == "eos"
        last = steps[-1]
        hit_inside |= last.accepted_length > len(last.emitted) - 1 or (
            last.emitted[-1].head != "target" and last.emitted[-1].token == eos_tok)
    assert hit_inside  # EOS arrived as an accepted draft token with more draft after it
    # max_new_tokens falling inside an accepted draft
    target.model.generation_config.eos_token_id = 1
    target.model.config.eos_token_id = 1
    for n in (1, 2, 3, 7, 11):
        ref, _ = run(target, prompt, max_new_tokens=n)
        drafter = OracleDrafter(prompt + free + [0] * 16, vocab=96, corrupt=0.0, seed=n)
        out, steps = run(target, prompt, drafter, max_new_tokens=n)
        assert out == ref and len(out) == min(n, len(ref)) and steps[-1].finish_reason in ("length", "eos")


def test_context_limit_honoured():
    target = tiny_target("llama", ctx=40)
    prompt = list(range(2, 30))
    ref, ref_steps = run(target, prompt, max_new_tokens=100)
    assert len(prompt) + len(ref) <= 40
    drafter = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.0)
    out, steps = run(target, prompt, drafter, max_new_tokens=100)
    assert out == ref and steps[-1].finish_reason == ref_steps[-1].finish_reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["gumiho", "serial", "parallel", "eagle", "eagle3"])
def test_real_drafter_random_weights_is_lossless(kind, dtype):
    """Also with a bfloat16 drafter on a float32 target (the CPU default where bf16
    is native): mixed dtypes between drafter and target must not leak into the output."""
    target = tiny_target("llama")
    torch.manual_seed(1)
    cfg = DrafterConfig.for_target(target.config, kind)
    drafter = Drafter(cfg).eval().attach_target(target.model).to(dtype)
    assert drafter._draft_head_weight.dtype == dtype
    for tree in (TreeSettings(total_tokens=8, depth=4, serial_top_k=2), TreeSettings(total_tokens=20, depth=7, serial_top_k=4,
                                                                                mlp_keep=4, full_tree_tokens=6)):
        for prompt in prompts(3, 96, seed=11):
            ref, _ = run(target, prompt, max_new_tokens=24)
            out, steps = run(target, prompt, drafter, max_new_tokens=24, tree=tree)
            assert out == ref
            assert all(s.drafted <= tree.total_tokens + tree.full_tree_tokens for s in steps)


def test_statistics_count_what_was_written_when_a_step_is_cut():
    """Issue 71: a step cut by the token limit counts only the drafts it wrote. Over runs
    whose limits cut the last step inside an accepted path: the accepted drafts counted
    (by position, by head, in the histogram) are the drafted tokens written, which are
    the new tokens less one target token per forward that wrote its own (the bonus), and
    what was accepted but cut is named in cut_nodes, not counted."""
    target = tiny_target("llama")
    cut_steps = 0
    for i, prompt in enumerate(prompts(10, 96, seed=71)):
        ref, _ = run(target, prompt, max_new_tokens=60)
        drafter = OracleDrafter(prompt + ref + [0] * 16, vocab=96, corrupt=0.0, seed=i)  # every draft right
        for limit in (5, 6, 7, 9, 11):
            out, steps = run(target, prompt, drafter, max_new_tokens=limit)
            assert out == ref[:limit]
            written_drafts = sum(1 for s in steps for e in s.emitted if e.position > 0)
            target_tokens = sum(1 for s in steps for e in s.emitted if e.position == 0)
            st = summarize(steps, 7)
            assert sum(s.accepted_length for s in steps) == written_drafts
            assert sum(st.accepted_by_head.values()) == written_drafts
            assert sum(k * n for k, n in enumerate(st.accepted_hist)) == written_drafts
            assert st.new_tokens - target_tokens == written_drafts
            by_position = [round(x * st.verify_steps) for x in st.acceptance_by_position(7)]
            assert sum(by_position) == written_drafts  # share at d, times the steps, summed over d
            cut_steps += bool(steps[-1].cut_nodes)
            for s in steps:
                assert s.accepted_length == len(s.accepted_nodes)
                assert not s.cut_nodes or s is steps[-1]
    assert cut_steps >= 10  # the limits really cut accepted paths
