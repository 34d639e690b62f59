"""Fixtures the vLLM tests share (tests/serving/test_vllm_env.py, tests/serving/test_vllm_plugin.py):
the vLLM environment, and the default target as `python -m gumiho.export target` writes
it (once for the session). Imported by name into each test module."""
import pytest

from gumiho.export.__main__ import main as export_main
from gumiho.serving.vllm_env import RegistryUnreachable, ensure_env


@pytest.fixture(scope="module")
def vllm_python():
    """The vLLM environment's python (built on first use, with the vllm-gumiho plugin).
    Skips only when it is not built and the package registry cannot be reached."""
    try:
        return ensure_env(log=print)
    except RegistryUnreachable as e:
        pytest.skip(f"vLLM cannot be prepared here: {e}")


@pytest.fixture(scope="session")
def exported_default(tmp_path_factory):
    """Written once for both modules: what they read of it is never changed."""
    folder = tmp_path_factory.mktemp("vllm") / "smollm2-135m-instruct"
    assert export_main(["target", str(folder)]) == 0  # the command a user runs
    return folder


def engine_chain(target, drafter_src, prompt_ids, max_new: int, chain: dict):
    """This engine drafting the chain vLLM drafts (``chain``: TreeSettings of a chain)
    with the drafter at ``drafter_src``: its tokens per prompt, and the accepted draft
    length of every verify step that drafted (what vLLM counts as one draft)."""
    from gumiho import GenerationSettings, TreeSettings, load_drafter, stream

    drafter = load_drafter(str(drafter_src), target, dtype="fp32")
    tokens, accepted = [], []
    for ids in prompt_ids:
        events = list(stream(target, ids, drafter, GenerationSettings(max_new_tokens=max_new,
                                                                      tree=TreeSettings(**chain))))
        tokens.append([t for e in events for t in e.tokens])
        accepted += [e.accepted_length for e in events if e.is_verify and e.drafted]
    return tokens, accepted
