"""A real serving engine in the loop: vLLM (its CPU build, in a virtual environment of
its own: gumiho.serving.vllm_env) loads the default target as `python -m gumiho.export
target` writes it and decodes greedily exactly the tokens this project's engine decodes.

Both engines see the same prompt token ids, made with the engine's chat template. vLLM
gets both cores (VLLM_CPU_OMP_THREADS_BIND=0-1, VLLM_CPU_NUM_OF_RESERVED_CPU=0) and a
1 GiB KV cache. Skipped only when the environment is not built yet and the package
registry cannot be reached to build it; a build that fails otherwise fails the test.

Cost on the 2-core machine (shared with other work, so the seconds are a guide): the
first run, which builds the environment (140 s of it: pip install, ~3.5 GB), took 291 s;
a cached run 146 s: the default target's export (~20 s) and the engine's own decoding
(~15 s), then two vLLM starts (~26-40 s each, eager: see run_vllm) and decodes (2-5 s)."""
import os

import pytest

from gumiho import generate, load_target
from gumiho.export.__main__ import main as export_main
from gumiho.serving import vllm_env
from gumiho.serving.vllm_env import RegistryUnreachable, ensure_env, run_vllm

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers."]
MAX_NEW = 24


@pytest.fixture(scope="module")
def vllm_python():
    try:
        return ensure_env(log=print)
    except RegistryUnreachable as e:
        pytest.skip(f"vLLM cannot be prepared here: {e}")


@pytest.fixture(scope="module")
def exported_default(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vllm") / "smollm2-135m-instruct"
    assert export_main(["target", str(folder)]) == 0  # the command a user runs
    return folder


@pytest.fixture(scope="module")
def engine_vanilla():
    """The engine's own greedy tokens per prompt, and the prompts' token ids."""
    target = load_target(None, device="cpu")
    prompt_ids = [target.encode(p) for p in PROMPTS]
    return prompt_ids, [generate(target, prompt_ids=ids, max_new_tokens=MAX_NEW).tokens for ids in prompt_ids]


def test_vllm_decodes_the_exported_default_target_exactly_as_the_engine(vllm_python, exported_default,
                                                                         engine_vanilla):
    prompt_ids, engine_tokens = engine_vanilla
    result = run_vllm(exported_default, prompt_ids, MAX_NEW, python=vllm_python)
    print(f"vLLM: loaded in {result['load_seconds']} s, decoded in {result['decode_seconds']} s")
    assert result["tokens"] == engine_tokens
    metrics = result["metrics"]
    assert metrics["vllm:prompt_tokens"] == sum(map(len, prompt_ids))
    assert metrics["vllm:generation_tokens"] == sum(map(len, engine_tokens))
    assert "spec_decode" not in result


def test_vllm_ngram_speculation_keeps_the_tokens_and_reports_its_counters(vllm_python, exported_default,
                                                                          engine_vanilla):
    """The driver's speculative path (the next step serves an exported EAGLE-3 drafter
    through it): vLLM's prompt-lookup drafting, greedy, gives the same tokens, and its
    spec-decode counters add up."""
    prompt_ids, engine_tokens = engine_vanilla
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    result = run_vllm(exported_default, prompt_ids, MAX_NEW, speculative_config=ngram, python=vllm_python)
    assert result["tokens"] == engine_tokens
    spec = result["spec_decode"]
    drafts, per_position = spec["vllm:spec_decode_num_drafts"], spec["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert 0 < drafts <= spec["vllm:spec_decode_num_draft_tokens"] <= 3 * drafts  # at most 3 per draft
    assert len(per_position) == 3 and sum(per_position) == spec["vllm:spec_decode_num_accepted_tokens"]


def test_a_registry_out_of_reach_is_told_from_a_failed_build(tmp_path, monkeypatch):
    """What the skip above rests on: with no package index to reach (pip told to use
    none), the build says so with RegistryUnreachable, and leaves no half-built folder
    that would pass for a ready one."""
    monkeypatch.setenv(vllm_env.ENV_VARIABLE, str(tmp_path / "env"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # and no local wheels either
    with pytest.raises(RegistryUnreachable, match="cannot be reached"):
        ensure_env()
    assert not (tmp_path / "env").exists() and not vllm_env.is_ready(tmp_path / "env")
    assert os.path.exists(tmp_path / f"env.{vllm_env.BUILD_LOG}")


def test_a_folder_without_a_model_is_refused_before_vllm_starts(tmp_path):
    with pytest.raises(vllm_env.VllmEnvError, match="not a model folder"):
        run_vllm(tmp_path, [[1, 2]], 4, python=tmp_path / "never-run")
