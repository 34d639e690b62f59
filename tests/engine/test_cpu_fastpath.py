"""The CPU fast paths of a decode step give the results of the plain ones: packed
linear layers, the growing KV cache and tree attention sharing key/value heads (the
drafter's growing KV: tests/proposers/test_learned.py)."""
import copy
import pickle
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import DynamicCache

from gumiho import Drafter, DrafterConfig
from gumiho.kernels.cpulinear import (
    PackedLinear,
    PackedWeight,
    available,
    available_bf16,
    full_precision_product,
    pack_linears,
)
from gumiho.runtimes.kvcache import GrowingLayer, cache_layers, keep_tree_entries, new_cache
from gumiho.runtimes.treeattn import NAME as TREE_ATTENTION
from gumiho.tree import DraftTree
from helpers import tiny_target

needs_packed = pytest.mark.skipif(not available(), reason="packed linear kernel unavailable in this build")


@needs_packed
def test_packed_linear_matches_f_linear_and_falls_back():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.Linear(24, 8, bias=False))
    ref = copy.deepcopy(model)
    pack_linears(model)
    assert all(type(m) is PackedLinear for m in model)
    assert model.state_dict().keys() == ref.state_dict().keys()
    for shape in [(1, 16), (3, 16), (2, 5, 16), (1, 1, 16)]:
        x = torch.randn(*shape)
        with torch.inference_mode():
            assert torch.allclose(model(x), ref(x), atol=1e-5)
        with torch.no_grad():
            assert torch.allclose(model(x), ref(x), atol=1e-5)
    # A weight changed in place is packed again.
    with torch.no_grad():
        model[0].weight.mul_(-2)
        ref[0].weight.mul_(-2)
        x = torch.randn(4, 16)
        assert torch.allclose(model(x), ref(x), atol=1e-5)
    # Autograd through the layer takes the plain path, gradients included.
    x = torch.randn(3, 16, requires_grad=True)
    model(x).sum().backward()
    xr = x.detach().clone().requires_grad_(True)
    ref(xr).sum().backward()
    assert torch.allclose(x.grad, xr.grad, atol=1e-5)
    assert torch.allclose(model[0].weight.grad, ref[0].weight.grad, atol=1e-5)
    # Copies and pickles carry no packed state.
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with torch.no_grad():
            assert torch.allclose(clone(x), ref(x), atol=1e-5)
    # Other dtypes take the plain path.
    with torch.no_grad():
        w = torch.randn(8, 16, dtype=torch.float64)
        xd = torch.randn(2, 16, dtype=torch.float64)
        assert torch.equal(PackedWeight(w)(xd), F.linear(xd, w))


@needs_packed
def test_packed_weight_is_owned_and_follows_its_weight():
    """A weight that is not a layer's is packed by the PackedWeight kept beside it:
    the same product as F.linear, made again after an in-place change, and no copy
    of it anywhere else (a copy or pickle carries none)."""
    torch.manual_seed(0)
    w, b, x = torch.randn(24, 16), torch.randn(24), torch.randn(3, 16)
    head = PackedWeight(w)
    with torch.no_grad():
        assert torch.allclose(head(x), F.linear(x, w), atol=1e-5)
        assert torch.allclose(head(x, b), F.linear(x, w, b), atol=1e-5)
        first = head._pk
        w.mul_(-3)
        assert torch.allclose(head(x), F.linear(x, w), atol=1e-5) and head._pk is not first
    assert pickle.loads(pickle.dumps(head))._pk is None and copy.deepcopy(head)._pk is None
    import gumiho.kernels.cpulinear as cpulinear
    stores = [name for name, v in vars(cpulinear).items() if not name.startswith("__")
              and (isinstance(v, (dict, torch.Tensor)) or type(v).__name__.startswith("Weak"))]
    assert not stores, f"a module-level store of weights: {stores}"


@needs_packed
def test_full_precision_product_skips_no_layer_and_no_4bit_copy():
    """A drafter's own LM head drafts in its own precision, packed or not."""
    torch.manual_seed(0)
    plain = nn.Linear(16, 40, bias=False)
    packed = pack_linears(copy.deepcopy(plain))
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert torch.equal(full_precision_product(plain, x), plain(x))
        assert torch.allclose(full_precision_product(packed, x), plain(x), atol=1e-5)


@pytest.mark.skipif(not available_bf16(), reason="no bf16 matrix instructions on this CPU (or no packed kernel)")
def test_packed_linear_takes_bfloat16_weights_where_the_cpu_has_them():
    """bf16 layers (the drafter on such CPUs) go through the packed kernel, and give
    F.linear's bf16 result up to bf16 rounding."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 32, bias=False)).bfloat16()
    model = pack_linears(copy.deepcopy(ref))
    for shape in [(1, 64), (3, 64), (2, 5, 64)]:
        x = torch.randn(*shape).bfloat16()
        with torch.inference_mode():
            got, want = model(x), ref(x)
        assert got.dtype == torch.bfloat16
        assert torch.allclose(got.float(), want.float(), atol=0.05, rtol=0.02)
    assert all(m.__dict__.get("_pk") is not None for m in model)  # packed once, then reused
    w, x = torch.randn(40, 64).bfloat16(), torch.randn(3, 64).bfloat16()
    with torch.no_grad():
        assert torch.allclose(PackedWeight(w)(x).float(), F.linear(x, w).float(), atol=0.05, rtol=0.02)
        # Mixed dtypes take the plain path (which refuses them, as F.linear does).
        with pytest.raises(RuntimeError):
            PackedWeight(w)(x.float())


@needs_packed
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_packed_linear_follows_a_dtype_change_after_use(dtype):
    """module.to(dtype) swaps a used layer's weight data in place (same Parameter, same
    version): the next call must not take the packing of the old data."""
    torch.manual_seed(0)
    model = pack_linears(nn.Sequential(nn.Linear(16, 24), nn.Linear(24, 8)))
    x = torch.randn(3, 16)
    with torch.no_grad():
        model(x)  # packs the float32 weights
        model.to(dtype)
        got = model(x.to(dtype))
        want = F.linear(F.linear(x.to(dtype), model[0].weight, model[0].bias), model[1].weight, model[1].bias)
    assert got.dtype == dtype
    assert torch.allclose(got.float(), want.float(), atol=0.05 if dtype == torch.bfloat16 else 1e-6)


def _same_cache(a, b):
    for la, lb in zip(cache_layers(a), cache_layers(b)):
        assert la.keys.shape == lb.keys.shape
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)


@pytest.mark.parametrize("inference", [True, False])
def test_growing_cache_matches_dynamic_cache(inference):
    """Random appends, tree compactions and crops: the growing cache holds what a
    DynamicCache holds, past its first capacity, in and out of inference mode."""
    target = tiny_target("llama", vocab=96, hidden=32, layers=2, heads=4, kv_heads=2, seed=1, ctx=1024)
    rng = random.Random(0)
    ctx = torch.inference_mode() if inference else torch.no_grad()
    with ctx:
        grow, ref = new_cache(), DynamicCache()
        seq = [rng.randrange(2, 96) for _ in range(5)]
        for c in (grow, ref):
            target.forward(seq, 0, c)
        assert all(isinstance(layer, GrowingLayer) for layer in cache_layers(grow))
        n = len(seq)
        while n < 400:
            t = rng.randint(1, 12)
            tree = DraftTree.root_only(rng.randrange(96))
            for i in range(1, t):
                p = rng.randrange(i)
                tree.add(rng.randrange(96), p, 1.0, 0.0, "serial")
            outs = [target.forward(tree.tokens, n, c, tree.parents)[1] for c in (grow, ref)]
            assert torch.equal(outs[0], outs[1])
            node = rng.randrange(t)
            kept = [0] + tree.path_to(node)
            for c in (grow, ref):
                keep_tree_entries(c, n, kept)
            n += len(kept)
            if rng.random() < 0.1:
                for c in (grow, ref):
                    c.crop(-2)
                n -= 2
            _same_cache(grow, ref)
            assert grow.get_seq_length() == n


def test_tree_attention_matches_sdpa():
    """The tree-verify attention (key/value heads shared, no copies) gives sdpa's logits."""
    target = tiny_target("qwen2", vocab=96, hidden=48, layers=2, heads=6, kv_heads=2, seed=2)
    assert target.runtime_model.config._attn_implementation == TREE_ATTENTION
    rng = random.Random(1)
    with torch.inference_mode():
        seq = [rng.randrange(2, 96) for _ in range(30)]
        tree = DraftTree.of([5, 7, 9, 11, 13, 15], [-1, 0, 0, 1, 1, 3])
        out = {}
        for impl in (TREE_ATTENTION, "sdpa"):
            target.runtime_model.set_attn_implementation(impl)
            cache = DynamicCache()
            target.forward(seq, 0, cache)
            out[impl] = target.forward(tree.tokens, len(seq), cache, tree.parents)[1]
        target.runtime_model.set_attn_implementation(TREE_ATTENTION)
    assert torch.allclose(out[TREE_ATTENTION], out["sdpa"], atol=1e-5)


def test_drafter_dtype_follows_the_cpu(monkeypatch):
    """auto: bf16 on a CPU with bf16 matrix instructions, else fp32; the target's
    dtype on a GPU; explicit choices are kept; a wrong name is refused clearly."""
    import gumiho.kernels.cpulinear as cpulinear
    from gumiho import GumihoError
    from gumiho.engine.target import Target
    from gumiho.loading import drafter_dtype

    cpu = Target(model=None, tokenizer=None, name="t", device=torch.device("cpu"), dtype=torch.float32)
    for native, want in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(cpulinear, "available_bf16", lambda native=native: native)
        assert drafter_dtype(cpu) == want and drafter_dtype(cpu, "auto") == want
        assert drafter_dtype(cpu, "fp32") == torch.float32 and drafter_dtype(cpu, "bf16") == torch.bfloat16
    gpu = Target(model=None, tokenizer=None, name="t", device=torch.device("cuda"), dtype=torch.float16)
    assert drafter_dtype(gpu) == torch.float16
    with pytest.raises(GumihoError, match="Unknown drafter dtype 'int3'"):
        drafter_dtype(cpu, "int3")


def test_drafter_draft_head_follows_the_drafter_dtype():
    """The draft-vocabulary rows of the target's LM head are kept in the drafter's
    dtype through .to() and set_draft_vocab, and draft logits match float32's."""
    target = tiny_target("llama")
    torch.manual_seed(0)
    drafter = Drafter(DrafterConfig.for_target(target.config, "gumiho")).eval().attach_target(target.model)
    drafter.set_draft_vocab(torch.arange(40, 80))
    h = torch.randn(3, drafter.cfg.hidden_size)
    want = drafter.draft_logits(h)
    drafter.to(torch.bfloat16)
    assert drafter._draft_head_weight.dtype == torch.bfloat16 and drafter._draft_head_weight.shape[0] == 40
    assert torch.allclose(drafter.draft_logits(h.bfloat16()).float(), want, atol=0.05, rtol=0.02)
    drafter.set_draft_vocab(torch.arange(10))
    assert drafter._draft_head_weight.dtype == torch.bfloat16 and drafter._draft_head_weight.shape[0] == 10
    drafter.float()
    assert drafter._draft_head_weight.dtype == torch.float32
    assert torch.equal(drafter._draft_head_weight, target.model.get_output_embeddings().weight[:10])
