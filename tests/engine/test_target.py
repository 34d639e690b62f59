"""gumiho.loading.prepare_target and the torch runtime's view (gumiho.runtimes.pytorch):
a model handed in and decoded through comes back as it went in (every class, its
attention implementation, its mode, every requires_grad), the view shares its weights
(no copy), and decoding through the view is the model's own greedy decoding."""
from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gumiho import GenerationSettings, TreeSettings, stream
from gumiho.kernels.cpulinear import PackedLinear, available
from gumiho.loading import prepare_target
from gumiho.runtimes.treeattn import NAME as TREE_ATTENTION
from helpers import OracleDrafter


def caller_model(tied: bool = True) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                         eos_token_id=1, tie_word_embeddings=tied, attn_implementation="sdpa"))
    model.train()  # as a user may hand it over, mid-training
    return model


def tokens(steps) -> list[int]:
    return [t for s in steps for t in s.tokens]


def fingerprint(model) -> tuple:
    return ([type(m) for m in model.modules()], model.config._attn_implementation, model.training,
            [(n, p.requires_grad, p.data_ptr()) for n, p in model.named_parameters()])


def test_a_model_handed_in_comes_back_as_it_went_in():
    model = caller_model()
    before = fingerprint(model)
    target = prepare_target(model, None, "tiny")
    prompt = [5, 17, 33, 2, 9]
    drafter = OracleDrafter(prompt + [0] * 64, vocab=96, corrupt=0.3, seed=1)
    tree = TreeSettings(total_tokens=6, depth=3, serial_top_k=2, mlp_top_k=1, mlp_keep=2, full_tree=False)
    assert tokens(stream(target, prompt, drafter, GenerationSettings(max_new_tokens=12, tree=tree)))
    assert fingerprint(model) == before  # classes, attention, mode, requires_grad, storage
    assert target.model is model

    view = target.runtime_model
    assert view is not model and not view.training
    assert not any(p.requires_grad for p in view.parameters())
    # The same weights, not a copy (the tied LM head included).
    assert [p.data_ptr() for p in view.parameters()] == [p.data_ptr() for p in model.parameters()]
    assert view.lm_head.weight is view.model.embed_tokens.weight
    if available():
        assert any(type(m) is PackedLinear for m in view.modules())
        assert not any(type(m) is PackedLinear for m in model.modules())
    assert view.config._attn_implementation == TREE_ATTENTION and model.config._attn_implementation == "sdpa"


def test_decoding_through_the_view_is_the_models_own_greedy_decoding():
    model = caller_model(tied=False).eval()
    target = prepare_target(model, None, "tiny")
    prompt = [5, 17, 33, 2, 9]
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
    ours = tokens(stream(target, prompt, None, GenerationSettings(max_new_tokens=16)))
    assert ours[:len(ref)] == ref[:len(ours)] and len(ours) > 0


def test_a_4bit_target_is_described_by_its_weights_not_the_float32_model_beside_it():
    """Issue 71: print(target) on the llama.cpp runtime said "float32, runtime=llama.cpp (4-bit ...)"."""
    from types import SimpleNamespace

    import torch

    from gumiho.engine.target import Target

    four_bit = SimpleNamespace(name="llama.cpp", weights="4-bit, as stored", quantized=True)
    text = repr(Target(None, None, "m", torch.device("cpu"), torch.float32, runtime=four_bit))
    assert "float32" not in text and "runtime=llama.cpp (4-bit, as stored)" in text
    plain = SimpleNamespace(name="torch", weights="float32", quantized=False)
    assert "cpu, float32, runtime=torch" in repr(Target(None, None, "m", torch.device("cpu"), torch.float32,
                                                        runtime=plain))
