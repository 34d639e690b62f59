"""The embedded default target converted once (gumiho.loading.embedded): the converted
folder loads the very model and tokenizer the GGUF file loads (every tensor bit for bit,
the same token ids and chat template, the same config but for the GGUF's quantisation
entry), a damaged folder is read past and written again, and a cache that cannot be
written costs nothing but the time."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from gumiho.loading import embedded
from gumiho.loading.assets import default_target_files

# The tier (pytest.ini's markers): one read of the real GGUF file, about 30 s.
pytestmark = [pytest.mark.slow]

TEXTS = ["Hello world", "  spaces\n\ttabs", "def f(x):\n    return x**2  # ünïcödé 日本語 🎉",
         "<|im_start|>user\nhi<|im_end|>"]


def same_model(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # The LM head is tied to the embedding in both (one tensor, not two copies).
    assert b.lm_head.weight.data_ptr() == b.model.embed_tokens.weight.data_ptr()
    da, db = a.config.to_dict(), b.config.to_dict()
    differ = {k for k in set(da) | set(db) if da.get(k) != db.get(k)}
    assert differ <= {"quantization_config", "_name_or_path"}, differ
    assert a.generation_config.to_dict() == b.generation_config.to_dict()


def same_tokenizer(a, b) -> None:
    for text in TEXTS:
        assert a.encode(text) == b.encode(text), text
    chat = [{"role": "user", "content": "Hi there"}]
    assert a.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == \
        b.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert (a.eos_token_id, a.bos_token_id, a.pad_token_id, len(a)) == (b.eos_token_id, b.bos_token_id,
                                                                         b.pad_token_id, len(b))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(embedded, "cache_root", lambda: tmp_path)
    return tmp_path


def test_the_converted_folder_is_the_gguf_model_and_a_damaged_one_is_written_again(cache, caplog, monkeypatch):
    folder, gguf = default_target_files()
    converted = embedded.converted_folder(str(Path(folder) / gguf))
    assert converted.parent == cache / "targets" and not converted.exists()

    from_file = embedded.load_embedded(folder, gguf, torch.float32)  # reads the GGUF, writes the folder
    assert (converted / embedded.DONE_MARK).is_file()
    assert not [p for p in converted.parent.iterdir() if p != converted]  # no work folder left behind
    from_folder = embedded.load_embedded(folder, gguf, torch.float32)
    same_tokenizer(from_file[0], from_folder[0])
    same_model(from_file[1], from_folder[1])
    logits = [m(torch.tensor([from_file[0].encode(TEXTS[2])])).logits for _, m in (from_file, from_folder)]
    assert torch.equal(*logits)
    # Another dtype is the float32 values cast, as transformers' GGUF loader casts them.
    half = embedded.load_embedded(folder, gguf, torch.bfloat16)[1]
    assert half.dtype == torch.bfloat16
    assert torch.equal(half.model.embed_tokens.weight, from_file[1].model.embed_tokens.weight.to(torch.bfloat16))

    # A damaged folder: the file is read again (the read already checked above, handed
    # back here rather than taking its 30 s twice) and the folder written again.
    reads = []
    monkeypatch.setattr(embedded, "read_gguf", lambda *where: reads.append(where) or from_file)
    (converted / "model.safetensors").write_bytes(b"cut short")
    with caplog.at_level(logging.WARNING, logger="gumiho"):
        again = embedded.load_embedded(folder, gguf, torch.float32)
    assert "could not be read" in caplog.text and reads == [(folder, gguf)]
    assert again[1] is from_file[1]
    assert (converted / embedded.DONE_MARK).is_file()
    same_model(from_file[1], embedded.load_embedded(folder, gguf, torch.float32)[1])


def test_a_cache_that_cannot_be_written_leaves_no_folder_and_raises_nothing(tmp_path, caplog):
    from transformers import LlamaConfig, LlamaForCausalLM

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    with caplog.at_level(logging.INFO, logger="gumiho"):
        embedded._write(blocker / "targets" / "x", tokenizer_never_reached(), model)
    assert "not kept converted" in caplog.text
    assert list(tmp_path.iterdir()) == [blocker]


def tokenizer_never_reached():
    class Never:
        def save_pretrained(self, folder):
            raise AssertionError("the folder could not be made: nothing is written")
    return Never()
