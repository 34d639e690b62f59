"""`python -m gumiho.export target OUT`: a target written as an ordinary transformers
folder. Re-loaded with plain `AutoModelForCausalLM.from_pretrained` + `AutoTokenizer`
(no gumiho code), it must give the engine's own greedy tokens and logits: equal within
LOGITS_ATOL_TINY on tiny random targets, LOGITS_ATOL_DEFAULT on the 30-layer default
target (float32: the engine's packed linear layers and the re-loaded model's plain ones
round differently; measured 1.4e-4 with logits up to ~38)."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from gumiho import GumihoError, generate, load_target
from gumiho.export import export_target
from gumiho.export.__main__ import main as export_main
from helpers import ROOT, tiny_target

LOGITS_ATOL_TINY = 1e-5
LOGITS_ATOL_DEFAULT = 1e-3
# A tiny target's logits (|x| < 1) from weights rounded to 16 bits and computed in 16 bits:
# measured 0.009 (fp16) and 0.075 (bf16); the weights themselves are compared exactly.
HALF_ATOL = {"fp16": 2e-2, "bf16": 2e-1}
# One word per token id of a tiny target (vocab 96). The special tokens are not "w" words:
# a special token is matched inside words too ("w1" would split "w10").
SPECIAL = {0: "<s>", 1: "</s>", 5: "<unk>"}
WORDS = [SPECIAL.get(i, f"w{i}") for i in range(96)]
TEMPLATE = ("{% for m in messages %}w2 {{ m['content'] }} w3 {% endfor %}"
            "{% if add_generation_prompt %}w4{% endif %}")


def word_tokenizer():
    """A word-level tokenizer over a tiny target's whole vocabulary, with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  pad_token="<s>")
    tok.chat_template = TEMPLATE
    return tok


def tiny_with_tokenizer(family="llama"):
    return dataclasses.replace(tiny_target(family), tokenizer=word_tokenizer())


def reload(folder):
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    return model.eval(), AutoTokenizer.from_pretrained(str(folder))


def transformers_greedy(model, prompt_ids, max_new_tokens):
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt_ids):].tolist()


def max_logit_gap(target, model, ids) -> float:
    with torch.no_grad():
        x = torch.tensor([ids])
        return (target.model(x).logits - model(x).logits.float()).abs().max().item()


@pytest.mark.parametrize("family, architecture", [("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM")])
def test_tiny_target_reloads_with_the_engines_tokens_and_logits(tmp_path, family, architecture):
    target = tiny_with_tokenizer(family)
    done = export_target(target, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [architecture] == [done.architecture]
    assert "quantization_config" not in config and config["dtype"] == "float32"
    model, _ = reload(tmp_path / "out")
    ids = target.encode("w7 w8 w9 w10")
    engine = generate(target, prompt_ids=ids, max_new_tokens=40).tokens
    assert transformers_greedy(model, ids, 40) == engine
    assert max_logit_gap(target, model, ids + engine) <= LOGITS_ATOL_TINY


def test_tokenizer_and_chat_template_give_the_engines_prompt_ids(tmp_path):
    """(On a Llama: transformers 5 re-reads a folder of model type qwen2 with its own
    Qwen2Tokenizer class, which the word-level test tokenizer is not.)"""
    target = tiny_with_tokenizer()
    export_target(target, tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for prompt in ("w7 w8 w9 w10", [{"role": "user", "content": "w11"}, {"role": "assistant", "content": "w12"},
                                    {"role": "user", "content": "w13 w90"}]):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
        assert ids == target.encode(prompt) and 5 not in ids  # every word known: no <unk>


def test_generation_config_stops_on_the_engines_eos(tmp_path):
    target = tiny_with_tokenizer()
    export_target(target, tmp_path)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 1 and (tmp_path / "chat_template.jinja").read_text() == TEMPLATE


@pytest.mark.parametrize("dtype, torch_dtype, stored, named", [("fp16", torch.float16, "F16", "float16"),
                                                                ("bf16", torch.bfloat16, "BF16", "bfloat16")])
def test_half_precision_exports(tmp_path, dtype, torch_dtype, stored, named):
    target = tiny_with_tokenizer()
    export_target(target, tmp_path, dtype=dtype)
    engine = target.model.state_dict()
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {stored}
        assert all(torch.equal(f.get_tensor(k), engine[k].to(torch_dtype)) for k in f.keys())
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == named
    model, _ = reload(tmp_path)
    assert model.dtype == torch_dtype
    assert max_logit_gap(target, model, list(range(2, 30))) <= HALF_ATOL[dtype]


def test_cli_exports_a_folder_target_given_with_model(tmp_path, capsys):
    export_target(tiny_with_tokenizer(), tmp_path / "first")
    assert export_main(["target", str(tmp_path / "second"), "--model", str(tmp_path / "first")]) == 0
    assert "LlamaForCausalLM" in capsys.readouterr().out
    a, b = reload(tmp_path / "first")[0], reload(tmp_path / "second")[0]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_force_replaces_the_model_files_and_keeps_the_rest(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"stale")
    with pytest.raises(GumihoError, match="not empty"):
        export_target(tiny_with_tokenizer(), tmp_path)
    export_target(tiny_with_tokenizer(), tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "model-00001-of-00002.safetensors").exists()
    reload(tmp_path)


def test_a_target_without_tokenizer_is_refused(tmp_path):
    with pytest.raises(GumihoError, match="no tokenizer"):
        export_target(tiny_target(), tmp_path)


def test_a_non_empty_output_folder_gets_one_message_and_no_traceback(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "gumiho.export", "target", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert done.returncode == 2 and "exists and is not empty" in done.stderr and "--force" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("problem, words", [("file", "is a file"), ("unknown model", "Could not load model"),
                                            ("no output", "No output folder given")])
def test_bad_input_gets_one_message(tmp_path, capsys, problem, words):
    out, extra = tmp_path / "out", []
    if problem == "file":
        out.write_text("")
    elif problem == "unknown model":
        extra = ["--model", str(tmp_path / "no" / "such" / "model")]
    else:
        out = " "
    assert export_main(["target", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


@pytest.mark.slow


def test_the_default_target_reloads_with_the_engines_tokens_and_logits(tmp_path):
    target = load_target(None, device="cpu", runtime="torch")
    done = export_target(target, tmp_path)
    assert done.architecture == "LlamaForCausalLM" and done.dtype == "fp32"
    model, tok = reload(tmp_path)
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    for prompt in ("What is the capital of France?", "Write a haiku about the sea."):
        ids = target.encode(prompt)
        assert tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                       tokenize=True)["input_ids"] == ids
        engine = generate(target, prompt_ids=ids, max_new_tokens=16).tokens
        assert transformers_greedy(model, ids, 16) == engine
        assert max_logit_gap(target, model, ids + engine) <= LOGITS_ATOL_DEFAULT
