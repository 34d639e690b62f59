"""The registry of named target/drafter pairs."""
import os

import pytest
import torch
from test_official import official_state

import gumiho.registry as registry
from gumiho import GumihoError, TreeSettings
from gumiho.loading import DEFAULT_TARGET, load_drafter
from gumiho.registry import OFFICIAL_TREE, get, lookup, names, resolve
from helpers import tiny_target

OFFICIAL = {
    "amd/Gumiho-vicuna-7b": "lmsys/vicuna-7b-v1.3",
    "amd/Gumiho-vicuna-13b": "lmsys/vicuna-13b-v1.3",
    "amd/Gumiho-llama2-7b": "meta-llama/Llama-2-7b-chat-hf",
    "amd/Gumiho-llama2-13b": "meta-llama/Llama-2-13b-chat-hf",
    "amd/Gumiho-llama2-70b": "meta-llama/Llama-2-70b-chat-hf",
    "amd/Gumiho-llama3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "amd/Gumiho-llama3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
}


def test_pairs_and_official_settings():
    assert names()[0] == "smollm2-135m-gumiho"
    assert {n for n in names() if n.startswith("smollm2")} == {f"smollm2-135m-{k}" for k in ("gumiho", "serial", "parallel", "eagle3")}
    for name, target in OFFICIAL.items():
        r = resolve(name)
        assert r.target == target and r.pair.official and r.pair.drafter == name
        assert r.tree == TreeSettings(total_tokens=63, depth=7, serial_top_k=14, mlp_top_k=35, mlp_keep=35,
                                      full_tree=True, full_tree_tokens=8)
    assert OFFICIAL_TREE["total_tokens"] == 63  # 64 verified tokens with the root
    assert resolve("amd/Gumiho-vicuna-7b").tree is not resolve("amd/Gumiho-vicuna-7b").tree  # fresh copies


def test_names_are_forgiving_and_unknown_is_clear():
    assert get("vicuna-7b") is None  # the short form is the hub repo's own name
    assert get("Gumiho-vicuna-7b").name == "amd/Gumiho-vicuna-7b"
    assert get("AMD/GUMIHO-LLAMA3-8B/").name == "amd/Gumiho-llama3-8b"
    assert get("") is None and get(None) is None
    with pytest.raises(GumihoError, match="Unknown model pair 'gpt-5'.*amd/Gumiho-llama3-70b"):
        resolve("gpt-5")


def test_default_pair_is_sized_for_the_device():
    r = resolve(None, device="cpu")
    assert r.target == DEFAULT_TARGET and r.pair.name == "smollm2-135m-gumiho"
    assert r.tree == TreeSettings.for_device("cpu")


def test_lookup_for_the_bench():
    assert lookup("lmsys/vicuna-7b-v1.3") is None and lookup(None) is None
    e = lookup("amd/Gumiho-llama2-13b")
    assert e["model"] == "meta-llama/Llama-2-13b-chat-hf" and e["drafters"] == {"gumiho": "amd/Gumiho-llama2-13b"}
    assert e["tree"].serial_top_k == 14
    assert lookup("smollm2-135m-serial")["model"] == DEFAULT_TARGET


def test_missing_shipped_drafter_is_clear(monkeypatch):
    monkeypatch.setattr(registry, "shipped_drafter_path", lambda kind: None)
    with pytest.raises(GumihoError, match="serial drafter for SmolLM2-135M-Instruct is not installed"):
        resolve("smollm2-135m-serial").load_drafter(None)


def test_official_pair_loads_through_load_drafter(tmp_path, monkeypatch):
    """Registry -> load_drafter -> gumiho.formats.official -> hub download, with the hub faked."""
    import huggingface_hub

    torch.save(official_state(), tmp_path / "pytorch_model.bin")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo_id, filename, revision=None: os.path.join(tmp_path, filename))
    target = tiny_target("llama", vocab=96, hidden=32, heads=4, kv_heads=2, layers=2, seed=11)
    d = resolve("amd/Gumiho-vicuna-7b").load_drafter(target)
    assert d.cfg.rms_norm_eps == 1e-6 and d.cfg.extra["source"] == "amd/Gumiho-vicuna-7b"
    assert load_drafter("amd/Gumiho-llama2-13b", target).cfg.rms_norm_eps == 1e-5
