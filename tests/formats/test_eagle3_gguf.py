"""The eagle3 drafter as the GGUF file llama.cpp's EAGLE-3 drafting loads
(gumiho.formats.eagle3_gguf): the tensor map, the rotary permutation, the header and
the copied tokenizer, read back with the gguf package; refusals in words. (llama.cpp's
server running the file is tests/serving/test_llamacpp_server.py.)"""
import os

import numpy as np
import pytest
import torch

from gumiho import GumihoError
from gumiho.drafter import Drafter, DrafterConfig
from gumiho.formats.eagle3_gguf import TENSOR_NAMES, WHY_NOT_GUMIHO, rotary_rows, write_eagle3_gguf

gguf = pytest.importorskip("gguf")

VOCAB, HIDDEN, LAYERS = 96, 32, 6


def tiny_eagle3(**overrides) -> Drafter:
    torch.manual_seed(0)
    fields = dict(hidden_size=HIDDEN, vocab_size=VOCAB, kind="eagle3", serial_positions=7, mlp_heads=0,
                  num_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
                  feature_layers=(1, 3, 4), draft_vocab_size=40)
    fields.update(overrides)
    drafter = Drafter(DrafterConfig(**fields))
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_()
    drafter.draft_vocab_ids = torch.arange(5, 5 + 2 * fields["draft_vocab_size"], 2)  # every other id from 5
    return drafter


def target_gguf(path, vocab=VOCAB, hidden=HIDDEN, layers=LAYERS) -> str:
    """A synthetic target file: a Llama header and a GPT-2 style tokenizer."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.embedding_length", hidden)
    writer.add_uint32("llama.block_count", layers)
    writer.add_uint32("llama.context_length", 2048)
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(vocab)])
    writer.add_array("tokenizer.ggml.token_type", [1] * vocab)
    writer.add_array("tokenizer.ggml.merges", ["t 1", "t 2"])
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_string("tokenizer.chat_template", "{{ messages }}")
    writer.add_tensor("token_embd.weight", np.zeros((vocab, hidden), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_the_rotary_permutation_keeps_every_attention_score():
    """transformers rotates x[j] with x[j + d/2]; llama.cpp's Llama rope rotates x[2j]
    with x[2j + 1]. With q and k rows permuted, every score q.k is the same."""
    torch.manual_seed(0)
    heads, d, cols, positions = 3, 8, 12, 5
    wq, wk = torch.randn(heads * d, cols), torch.randn(heads * d, cols)
    x = torch.randn(positions, cols)
    freqs = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))  # [d/2]
    angle = torch.arange(positions).float()[:, None] * freqs  # [T, d/2]

    def rope_halves(v):  # v [T, heads, d]: transformers' layout
        a, b = v[..., : d // 2], v[..., d // 2:]
        c, s = angle.cos()[:, None], angle.sin()[:, None]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    def rope_pairs(v):  # llama.cpp's normal mode: neighbours
        a, b = v[..., 0::2], v[..., 1::2]
        c, s = angle.cos()[:, None], angle.sin()[:, None]
        return torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)

    def scores(q, k):
        return torch.einsum("thd,shd->hts", q, k)

    hf = scores(rope_halves((x @ wq.T).view(positions, heads, d)), rope_halves((x @ wk.T).view(positions, heads, d)))
    ggml = scores(rope_pairs((x @ rotary_rows(wq, heads).T).view(positions, heads, d)),
                  rope_pairs((x @ rotary_rows(wk, heads).T).view(positions, heads, d)))
    assert torch.allclose(hf, ggml, atol=1e-4)
    # and without the permutation they differ: the test can fail
    wrong = scores(rope_pairs((x @ wq.T).view(positions, heads, d)), rope_pairs((x @ wk.T).view(positions, heads, d)))
    assert not torch.allclose(hf, wrong, atol=1e-2)


def test_the_file_holds_the_drafter_the_map_and_the_targets_tokenizer(tmp_path):
    drafter = tiny_eagle3()
    target = target_gguf(tmp_path / "target.gguf")
    out = tmp_path / "drafter.gguf"
    written = write_eagle3_gguf(drafter, str(out), target, dtype="fp32")
    assert written["draft_vocab"] == 40 and written["target_layers"] == [1, 3, 4]
    assert oct(os.stat(out).st_mode & 0o777) == oct(os.stat(target).st_mode & 0o777)
    reader = gguf.GGUFReader(str(out))
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert fields["general.architecture"] == "eagle3"
    assert fields["eagle3.target_layers"] == [1, 3, 4] and fields["eagle3.target_hidden_size"] == HIDDEN
    assert fields["eagle3.embedding_length"] == HIDDEN and fields["eagle3.block_count"] == 1
    assert fields["eagle3.attention.head_count"] == 4 and fields["eagle3.attention.head_count_kv"] == 2
    assert fields["eagle3.norm_before_residual"] is False
    source = gguf.GGUFReader(target)
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            assert fields[key] == field.contents(), key
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == set(TENSOR_NAMES.values()) | {"d2t"}
    assert np.array_equal(np.asarray(tensors["d2t"].data), drafter.draft_vocab_ids.numpy())  # absolute ids
    state = drafter.state_dict()
    for name, gguf_name in TENSOR_NAMES.items():
        data = np.asarray(tensors[gguf_name].data).reshape(state[name].shape)
        expected = state[name]
        if name.endswith("q_proj.weight"):
            expected = rotary_rows(expected, 4)
        elif name.endswith("k_proj.weight"):
            expected = rotary_rows(expected, 2)
        assert np.allclose(data, expected.numpy()), name
    assert not np.allclose(np.asarray(tensors["blk.0.attn_q.weight"].data).reshape(32, 64),
                           state["layers.0.self_attn.q_proj.weight"].numpy())


def test_half_precision_keeps_norms_in_float32(tmp_path):
    target = target_gguf(tmp_path / "target.gguf")
    write_eagle3_gguf(tiny_eagle3(), str(tmp_path / "d.gguf"), target, dtype="fp16")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "d.gguf")).tensors}
    assert types["fc.weight"] == "F16" and types["output.weight"] == "F16"
    assert types["blk.0.attn_norm.weight"] == "F32" and types["output_norm.weight"] == "F32"
    assert types["d2t"] == "I64"


def test_what_llama_cpp_cannot_run_is_refused_in_words(tmp_path):
    target = target_gguf(tmp_path / "target.gguf")
    out = str(tmp_path / "d.gguf")
    gumiho_kind = Drafter(DrafterConfig(hidden_size=HIDDEN, vocab_size=VOCAB, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, intermediate_size=64))
    with pytest.raises(GumihoError) as refused:
        write_eagle3_gguf(gumiho_kind, out, target)
    assert str(refused.value) == WHY_NOT_GUMIHO and "tree" in WHY_NOT_GUMIHO and "speculative" in WHY_NOT_GUMIHO
    with pytest.raises(GumihoError, match="vocabulary of 96 tokens; other.gguf has 100"):
        write_eagle3_gguf(tiny_eagle3(), out, target_gguf(tmp_path / "other.gguf", vocab=100))
    with pytest.raises(GumihoError, match="32 wide; wide.gguf is 48 wide"):
        write_eagle3_gguf(tiny_eagle3(), out, target_gguf(tmp_path / "wide.gguf", hidden=48))
    with pytest.raises(GumihoError, match="fuses target layer 4; shallow.gguf has 3 layers"):
        write_eagle3_gguf(tiny_eagle3(), out, target_gguf(tmp_path / "shallow.gguf", layers=3))
    doubled = tiny_eagle3()
    doubled.draft_vocab_ids = doubled.draft_vocab_ids.clone()
    doubled.draft_vocab_ids[1] = doubled.draft_vocab_ids[0]
    with pytest.raises(GumihoError, match="two draft tokens to the same target token"):
        write_eagle3_gguf(doubled, out, target)
    beyond = tiny_eagle3()
    beyond.draft_vocab_ids = beyond.draft_vocab_ids + VOCAB
    with pytest.raises(GumihoError, match="outside the target's vocabulary of 96"):
        write_eagle3_gguf(beyond, out, target)
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(GumihoError, match="cannot be read as GGUF"):
        write_eagle3_gguf(tiny_eagle3(), out, str(tmp_path / "junk.gguf"))
    assert not os.path.exists(out) and not os.path.exists(out + ".part")


def test_the_shipped_drafter_against_the_shipped_target(tmp_path):
    from gumiho.formats.gguf_target import default_target_file
    from gumiho.loading import shipped_drafter_path

    drafter = Drafter.load(shipped_drafter_path("eagle3"))
    written = write_eagle3_gguf(drafter, str(tmp_path / "d.gguf"), default_target_file())
    assert written == {"draft_vocab": 8191, "target_layers": [2, 15, 27], "dtype": "fp16", "vocab": 49152}
    d2t = [t for t in gguf.GGUFReader(str(tmp_path / "d.gguf")).tensors if t.name == "d2t"][0]
    assert np.array_equal(np.asarray(d2t.data), drafter.draft_vocab_ids.numpy())


def test_the_export_command_writes_both_files_or_refuses_in_words(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-m", "gumiho.export", "gguf", "shipped", str(tmp_path / "out")], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "wrote drafter.gguf, target.gguf" in out.stdout and "fused target layers [2, 15, 27]" in out.stdout
    from gumiho.formats.gguf_target import default_target_file

    assert os.path.getsize(tmp_path / "out" / "target.gguf") == os.path.getsize(default_target_file())
    assert gguf.GGUFReader(str(tmp_path / "out" / "drafter.gguf")).fields["general.architecture"].contents() == "eagle3"
    from gumiho.loading import shipped_drafter_path

    refused = subprocess.run([sys.executable, "-m", "gumiho.export", "gguf", shipped_drafter_path("gumiho"),
                              str(tmp_path / "g")], cwd=root, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "llama.cpp has no Gumiho drafting" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "g").exists()
