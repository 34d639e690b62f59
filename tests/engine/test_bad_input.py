"""Every input problem raises GumihoError (a ValueError) whose message names what is wrong."""
import json
import math
import os

import pytest
import torch

from gumiho import (
    Drafter,
    DrafterConfig,
    GenerationSettings,
    GumihoError,
    TreeSettings,
    generate,
    load_drafter,
    load_target,
    stream,
)
from gumiho.loading import pick_device, pick_dtype
from helpers import tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target("llama", ctx=16)


@pytest.fixture(scope="module")
def chat_target():
    """A tiny target with a real (word-level) tokenizer and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<eos>", "user", "assistant", ":"] + "hello world the cat sat".split()
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>")
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                         "{% if add_generation_prompt %}assistant :{% endif %}")
    t = tiny_target("llama", ctx=16)
    t.tokenizer = tok
    return t


def run(target, prompt_ids, drafter=None, **settings):
    return [t for s in stream(target, prompt_ids, drafter, GenerationSettings(**settings)) for t in s.tokens]


# ----------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t  \n", None, [], [{"role": "user", "content": "  "}],
                                    [{"role": "system", "content": ""}, {"role": "user", "content": "\n"}]])
def test_empty_prompt(chat_target, prompt):
    with pytest.raises(GumihoError, match="prompt is empty"):
        chat_target.encode(prompt)
    with pytest.raises(GumihoError, match="prompt is empty"):
        generate(chat_target, prompt, max_new_tokens=4)


def test_malformed_prompt(chat_target):
    assert chat_target.encode("hello world")  # the good case works
    for bad in ([{"role": "user"}], [{"content": "hi"}], ["hello"], [{"role": "user", "content": 3}]):
        with pytest.raises(GumihoError, match="Chat messages"):
            chat_target.encode(bad)
    with pytest.raises(GumihoError, match="prompt must be text"):
        chat_target.encode(42)


def test_empty_prompt_ids(target):
    with pytest.raises(GumihoError, match="prompt is empty"):
        run(target, [], max_new_tokens=4)


def test_prompt_longer_than_context(target):
    for n in (16, 17, 40):
        with pytest.raises(GumihoError, match=rf"prompt is {n} tokens long .* at most 16 tokens"):
            run(target, list(range(2, 2 + n)), max_new_tokens=4)
    # One token of room is enough: exactly one token, stopped by the context.
    steps = list(stream(target, list(range(2, 17)), None, GenerationSettings(max_new_tokens=4)))
    assert sum(len(s.emitted) for s in steps) == 1 and steps[-1].finish_reason == "context"


# ----------------------------------------------------------------------------- generation settings


@pytest.mark.parametrize("value", [0, -1, -100, True, False, 2.5, "8", None, 10**7])
def test_bad_max_new_tokens(target, value):
    with pytest.raises(GumihoError, match="max_new_tokens"):
        run(target, [5, 6, 7], max_new_tokens=value)


@pytest.mark.parametrize("value", [-0.1, -1, math.nan, math.inf, -math.inf, 1000.0, "0.7", None, True])
def test_bad_temperature(target, value):
    with pytest.raises(GumihoError, match="temperature"):
        run(target, [5, 6, 7], max_new_tokens=4, temperature=value)


@pytest.mark.parametrize("value", [0, 0.0, -0.5, 1.01, 2, math.nan, math.inf, "0.9", None])
def test_bad_top_p(target, value):
    with pytest.raises(GumihoError, match="top_p"):
        run(target, [5, 6, 7], max_new_tokens=4, temperature=0.8, top_p=value)


@pytest.mark.parametrize("value", [-1, -50, 1.5, True, "3", None])
def test_bad_top_k(target, value):
    with pytest.raises(GumihoError, match="top_k"):
        run(target, [5, 6, 7], max_new_tokens=4, temperature=0.8, top_k=value)


def test_good_edge_values_are_accepted(target):
    assert len(run(target, [5, 6, 7], max_new_tokens=1)) == 1
    assert len(run(target, [5, 6, 7], max_new_tokens=3, temperature=1e-3, top_p=1.0, top_k=1, seed=0)) >= 1
    assert len(run(target, [5, 6, 7], max_new_tokens=3, temperature=100, top_p=1e-6, seed=0)) >= 1


@pytest.mark.parametrize("field,value", [("total_tokens", 0), ("total_tokens", -3), ("total_tokens", 10_000),
                                         ("total_tokens", 2.5), ("depth", 0), ("depth", True), ("serial_top_k", -1),
                                         ("mlp_top_k", 0), ("mlp_keep", 0), ("mlp_keep", "4"),
                                         ("full_tree_tokens", -1), ("full_tree_tokens", 1.5)])
def test_bad_tree_settings(target, field, value):
    tree = TreeSettings(**{field: value})
    with pytest.raises(GumihoError, match=field):
        tree.validate()
    drafter = Drafter(DrafterConfig.for_target(target.config)).eval().attach_target(target.model)
    with pytest.raises(GumihoError, match=field):
        run(target, [5, 6, 7], drafter, max_new_tokens=4, tree=tree)


def test_unknown_generation_setting(target):
    with pytest.raises(GumihoError, match="Unknown generation setting 'temprature'"):
        generate(target, prompt_ids=[5, 6, 7], temprature=0.5)


def test_generate_leaves_the_callers_settings_as_they_were(chat_target):
    """Keyword overrides apply to this call only: the settings object the caller
    passed (and may pass again) keeps its own values."""
    tree = TreeSettings(total_tokens=3, depth=2)
    settings = GenerationSettings(max_new_tokens=20, tree=tree)
    before = repr(settings)
    result = generate(chat_target, prompt_ids=[5, 6, 7], settings=settings, max_new_tokens=3,
                      tree=TreeSettings(total_tokens=2, depth=1))
    assert len(result.tokens) <= 3
    assert repr(settings) == before and settings.max_new_tokens == 20 and settings.tree is tree


def test_bad_device_and_dtype():
    for device in ("tpu", "banana"):
        with pytest.raises(GumihoError, match="Unknown device"):
            pick_device(device)
    if not torch.cuda.is_available():
        with pytest.raises(GumihoError, match="no CUDA GPU"):
            pick_device("cuda")
    with pytest.raises(GumihoError, match="Unknown dtype 'fp8'"):
        pick_dtype("fp8", torch.device("cpu"))


# ----------------------------------------------------------------------------- models


def test_unknown_model_id_while_offline(monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # read once at import: set the live value too
    for name in ("gumiho-tests/no-such-model-anywhere", "no-such-model-anywhere-xyz"):
        with pytest.raises(GumihoError, match=rf"Could not load model '{name}'.*Offline mode"):
            load_target(name, device="cpu")


def test_nonexistent_local_path(tmp_path):
    for path in (str(tmp_path / "missing"), "/nonexistent/gumiho/model", "./no/such/folder"):
        with pytest.raises(GumihoError, match="does not exist"):
            load_target(path, device="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GumihoError, match="Could not load model"):
        load_target(str(empty), device="cpu")
    with pytest.raises(GumihoError, match="model id or path is empty"):
        load_target("   ", device="cpu")


# ----------------------------------------------------------------------------- drafters


def _saved_drafter(tmp_path, target, name="drafter"):
    folder = tmp_path / name
    Drafter(DrafterConfig.for_target(target.config, "gumiho")).save(str(folder))
    return folder


def test_drafter_for_another_model(tmp_path, target):
    wider = tiny_target("llama", hidden=48, heads=4, kv_heads=2)
    other_vocab = tiny_target("llama", vocab=80)
    folder = _saved_drafter(tmp_path, target)
    assert load_drafter(str(folder), target) is not None  # the right target loads fine
    with pytest.raises(GumihoError, match="hidden size 32 does not match the target's 48"):
        load_drafter(str(folder), wider)
    with pytest.raises(GumihoError, match="vocabulary 96 does not match the target's 80"):
        load_drafter(str(folder), other_vocab)
    drafter = Drafter(DrafterConfig.for_target(wider.config))
    with pytest.raises(GumihoError, match="hidden size 48 does not match"):
        drafter.attach_target(target.model)


@pytest.mark.parametrize("keep", [0.5, 0.02, 4, 0])
def test_truncated_safetensors(tmp_path, target, keep):
    folder = _saved_drafter(tmp_path, target)
    path = folder / "model.safetensors"
    size = path.stat().st_size
    n = int(size * keep) if isinstance(keep, float) else keep
    with open(path, "r+b") as f:
        f.truncate(n)
    with pytest.raises(GumihoError, match="truncated or corrupt"):
        load_drafter(str(folder), target)


def test_corrupt_safetensors(tmp_path, target):
    folder = _saved_drafter(tmp_path, target)
    (folder / "model.safetensors").write_bytes(os.urandom(4096))
    with pytest.raises(GumihoError, match="truncated or corrupt"):
        load_drafter(str(folder), target)


def test_missing_or_bad_drafter_files(tmp_path, target):
    folder = _saved_drafter(tmp_path, target)
    (folder / "config.json").unlink()
    with pytest.raises(GumihoError, match="has model.safetensors but no config.json"):
        load_drafter(str(folder), target)
    folder = _saved_drafter(tmp_path, target, "d2")
    (folder / "model.safetensors").unlink()
    with pytest.raises(GumihoError, match="must hold config.json and model.safetensors"):
        load_drafter(str(folder), target)
    with pytest.raises(GumihoError, match="does not exist"):
        load_drafter(str(tmp_path / "nowhere"), target)
    folder = _saved_drafter(tmp_path, target, "d3")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(GumihoError, match="config.json cannot be read as JSON"):
        load_drafter(str(folder), target)
    (folder / "config.json").write_text('{"hidden_size": 32, "vocab_size": 96, "kind": "hydra"}')
    with pytest.raises(GumihoError, match="Unknown drafter kind 'hydra'"):
        load_drafter(str(folder), target)
    (folder / "config.json").write_text('{"hidden_size": 32, "vocab_size": 96, "kind": "gumiho", "colour": "red"}')
    with pytest.raises(GumihoError, match="settings a drafter config does not have: colour"):
        load_drafter(str(folder), target)
    (folder / "config.json").write_text('{"hidden_size": 32, "kind": "gumiho", "vocab_size": null}')
    with pytest.raises(GumihoError, match="vocab_size must be a whole number"):
        load_drafter(str(folder), target)
    (folder / "config.json").write_text('{"hidden_size": 32, "vocab_size": 96, "colour": "red"}')
    with pytest.raises(GumihoError, match="no layout this engine reads"):
        load_drafter(str(folder), target)
    # Weights that belong to a different architecture than the config describes.
    other = tiny_target("llama", hidden=48, heads=4, kv_heads=2)
    Drafter(DrafterConfig.for_target(other.config)).save(str(tmp_path / "d4"))
    (tmp_path / "d4" / "config.json").write_text((_saved_drafter(tmp_path, target, "d5") / "config.json").read_text())
    with pytest.raises(GumihoError, match="does not match its config: tensor .* has shape \\[48\\] in the weights"):
        load_drafter(str(tmp_path / "d4"), target)


def test_errors_are_value_errors():
    assert issubclass(GumihoError, ValueError)


# ----------------------------------------------------------------------------- hostile or careless input


@pytest.mark.parametrize("seed", [2**70, -1, 1.5, "abc", True])
def test_bad_seed(target, seed):
    with pytest.raises(GumihoError, match=r"seed must be a whole number from 0 to 2\*\*64 - 1, or None"):
        run(target, [5, 6, 7], max_new_tokens=2, temperature=0.5, seed=seed)
    assert len(run(target, [5, 6, 7], max_new_tokens=2, temperature=0.5, seed=2**64 - 1)) == 2  # the edge is fine


@pytest.mark.parametrize("ids, match", [([-1], r"prompt_ids\[0\] = -1 is not a token id of tiny-llama: its ids run "
                                               r"from 0 to 95"),
                                        ([5, 10**7], r"prompt_ids\[1\] = 10000000 is not a token id"),
                                        ([5, 2.0], r"prompt_ids\[1\] is 2.0, not a token id"),
                                        ([True], r"prompt_ids\[0\] is True, not a token id"),
                                        ("hello", "prompt_ids must be a list of token ids"),
                                        (7, "prompt_ids must be a list of token ids")])
def test_bad_prompt_ids(target, ids, match):
    with pytest.raises(GumihoError, match=match):
        generate(target, prompt_ids=ids, max_new_tokens=2)
    with pytest.raises(GumihoError, match=match):
        run(target, ids, max_new_tokens=2)


def test_settings_and_tree_given_as_dicts(target):
    with pytest.raises(GumihoError, match=r"tree must be a TreeSettings.*TreeSettings\(\*\*d\).*got dict"):
        generate(target, prompt_ids=[5, 6], max_new_tokens=2, tree={"depth": 2})
    with pytest.raises(GumihoError,
                       match=r"settings must be a GenerationSettings.*GenerationSettings\(\*\*d\).*got dict"):
        list(stream(target, [5, 6], None, {"max_new_tokens": 2}))
    with pytest.raises(GumihoError, match="settings must be a GenerationSettings"):
        generate(target, prompt_ids=[5, 6], settings={"max_new_tokens": 2})


@pytest.mark.parametrize("prompt", ["caf\ud800", [{"role": "user", "content": "hi \udfff there"}]])
def test_lone_surrogate_in_prompt(chat_target, prompt):
    with pytest.raises(GumihoError, match=r"The prompt holds an invalid character at position \d+ \(a lone "
                                          r"surrogate, U\+D[8F]\w\w.*remove it or paste the text again"):
        chat_target.encode(prompt)


def test_load_drafter_without_a_target(tmp_path, target):
    folder = _saved_drafter(tmp_path, target)
    with pytest.raises(GumihoError, match=r"load_drafter needs the loaded target .* got NoneType: call "
                                          r"load_drafter\(path, load_target\(...\)\)"):
        load_drafter(str(folder), None)


def test_drafter_path_that_is_no_drafter_gets_one_answer(tmp_path, target):
    """A text file, a folder of something else and a missing path are answered alike
    (no raw unpickler error for the file, and nothing that tells which paths exist)."""
    (tmp_path / "notes.txt").write_text("hello\n" * 10)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "readme.txt").write_text("x")
    messages = []
    for path in (tmp_path / "notes.txt", tmp_path / "other", tmp_path / "missing.txt", tmp_path / "missing"):
        with pytest.raises(GumihoError, match="does not exist or is not a drafter. A drafter folder must hold "
                                              "config.json and model.safetensors") as err:
            load_drafter(str(path), target)
        messages.append(str(err.value).replace(str(path), "PATH"))
    assert len(set(messages)) == 1, messages


def test_drafter_config_with_bad_sizes(tmp_path, target):
    folder = _saved_drafter(tmp_path, target)
    for field, value in (("hidden_size", -5), ("intermediate_size", "big"), ("num_layers", 1.5),
                         ("rms_norm_eps", 0)):
        cfg = json.loads((folder / "config.json").read_text())
        cfg[field] = value
        (folder / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(GumihoError, match=f"Drafter setting {field} must be a .*keep the config.json saved"):
            load_drafter(str(folder), target)
        _saved_drafter(tmp_path, target)  # restore
