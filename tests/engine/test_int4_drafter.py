"""A drafter's 4-bit products (gumiho.kernels.int4linear): the rounding's bound, the kernel
against the dequantised weight, the fallbacks, and a 4-bit drafter that changes
what is drafted but never the output. Chosen by default only beside a quantized
runtime (gumiho.loading.drafter_int4)."""
import copy
import pickle
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from gumiho import GenerationSettings, TreeSettings, stream
from gumiho.errors import GumihoError
from gumiho.kernels import int4linear
from gumiho.kernels.int4linear import GROUP, Int4Linear, dequantize, int4_linears, product, quantize, quantize_groups
from gumiho.loading import drafter_int4, random_drafter
from helpers import tiny_target


def tokens(target, prompt, drafter, settings):
    return [t for step in stream(target, prompt, drafter, settings) for t in step.tokens]


needs_kernel = pytest.mark.skipif(not int4linear.available(),
                                  reason="4-bit drafter products need a CPU with AVX512-BF16 and torch's int4 kernel")


def test_the_rounding_keeps_every_weight_within_half_a_step():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(24, 4 * GROUP, generator=g) * torch.logspace(-3, 0, 24)[:, None]  # rows of every scale
    codes, scale, low = quantize_groups(w)
    assert codes.dtype == torch.int32 and int(codes.min()) >= 0 and int(codes.max()) <= 15
    assert scale.shape == low.shape == (24, 4)
    err = (dequantize(codes, scale, low) - w).abs().reshape(24, 4, GROUP)
    assert (err <= scale[..., None] / 2 * (1 + 1e-4) + 1e-7).all()
    # Each group's extremes are codes 0 and 15, so its range is kept exactly.
    groups = codes.reshape(24, 4, GROUP)
    assert (groups.amin(-1) == 0).all() and (groups.amax(-1) == 15).all()
    # A weight already on a group's grid comes back as it was.
    grid = low[..., None] + torch.randint(0, 16, (24, 4, GROUP), generator=g) * scale[..., None]
    grid[..., 0], grid[..., 1] = low, low + 15 * scale
    grid = grid.reshape(24, 4 * GROUP)
    assert torch.allclose(dequantize(*quantize_groups(grid)), grid, atol=1e-6)


@needs_kernel
@pytest.mark.parametrize("rows", [16, 40, 7])  # 40 and 7: padded to the kernel's 16-row multiple
def test_the_kernel_multiplies_by_the_dequantised_weight(rows):
    g = torch.Generator().manual_seed(rows)
    w, bias = torch.randn(rows, 3 * GROUP, generator=g), torch.randn(rows, generator=g)
    deq = dequantize(*quantize_groups(w))
    q = quantize(w)
    for shape in [(1, 3 * GROUP), (5, 3 * GROUP), (2, 3, 3 * GROUP)]:
        x = torch.randn(*shape, generator=g)
        with torch.inference_mode():
            y = product(x, q, bias)
        assert y.shape == (*shape[:-1], rows) and y.dtype == x.dtype
        want = x.bfloat16().float() @ deq.T + bias
        # bfloat16 activations, scales and sums: about 3 significant digits.
        assert torch.allclose(y, want, atol=0.05, rtol=0.02), (y - want).abs().max()


@needs_kernel
def test_an_int4_linear_falls_back_and_follows_its_weight():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2 * GROUP, 48), nn.Linear(48, 5, bias=False))  # 48 inputs: no whole groups
    ref = copy.deepcopy(model)
    int4_linears(model)
    assert all(type(m) is Int4Linear for m in model)
    assert model[0]._int4 is not None and model[1]._int4 is None  # the second cannot take the layout
    assert model.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(3, 2 * GROUP)
    with torch.no_grad():
        y, want = model(x), ref(x)
    assert not torch.equal(y, want) and torch.allclose(y, want, atol=0.1, rtol=0.05)  # rounded, and close
    with torch.no_grad():  # a weight changed in place gets a new 4-bit copy
        model[0].weight.mul_(-2)
        ref[0].weight.mul_(-2)
        assert torch.allclose(model(x), ref(x), atol=0.2, rtol=0.05)
    # Autograd takes the full-precision product: training sees the weights as they are.
    xg = x.clone().requires_grad_(True)
    model(xg).sum().backward()
    xr = x.clone().requires_grad_(True)
    ref(xr).sum().backward()
    assert torch.allclose(xg.grad, xr.grad, atol=1e-5)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with torch.no_grad():
            assert torch.allclose(clone(x), ref(x), atol=0.2, rtol=0.05)


@needs_kernel
def test_a_4bit_drafter_drafts_close_to_its_weights_and_stays_lossless(tmp_path):
    target = tiny_target("llama", hidden=64, heads=4, kv_heads=2, vocab=96)
    full = random_drafter(target, "gumiho", seed=1, dtype="bf16")
    four = random_drafter(target, "gumiho", seed=1, dtype="int4")
    assert four.int4 and not full.int4 and four._draft_head_int4 is not None
    assert all(type(m) is Int4Linear for m in four.modules() if isinstance(m, nn.Linear))
    h = torch.randn(4, 64).bfloat16()
    with torch.inference_mode():
        a, b = full.draft_logits(h).float(), four.draft_logits(h).float()
    assert not torch.equal(a, b) and torch.allclose(a, b, atol=0.15 * float(a.abs().max()))
    # Saved, it is the drafter it was: the 4-bit copies are not part of it.
    four.save(str(tmp_path / "d"))
    full.save(str(tmp_path / "f"))
    assert (tmp_path / "d" / "model.safetensors").read_bytes() == (tmp_path / "f" / "model.safetensors").read_bytes()
    tree = TreeSettings(total_tokens=12, depth=5, serial_top_k=3, mlp_top_k=2)
    g = torch.Generator().manual_seed(4)
    for _ in range(4):
        prompt = torch.randint(2, 96, (9,), generator=g).tolist()
        s = GenerationSettings(max_new_tokens=30, tree=tree)
        assert tokens(target, prompt, four, s) == tokens(target, prompt, None, s)


def fake_target(quantized: bool, device: str = "cpu"):
    return SimpleNamespace(device=torch.device(device), runtime=SimpleNamespace(quantized=quantized))


def test_auto_drafts_in_4bit_only_beside_a_quantized_runtime(monkeypatch):
    monkeypatch.setattr(int4linear, "available", lambda: True)
    assert drafter_int4(fake_target(True)) and drafter_int4(fake_target(True), "auto")
    assert not drafter_int4(fake_target(False))  # the float32 runtime: its verify dwarfs the drafter
    for dtype in ("fp32", "bf16"):
        assert not drafter_int4(fake_target(True), dtype)
    assert drafter_int4(fake_target(False), "int4")  # asked for
    monkeypatch.setattr(int4linear, "available", lambda: False)
    assert not drafter_int4(fake_target(True))
    with pytest.raises(GumihoError, match="AVX512-BF16"):
        drafter_int4(fake_target(True), "int4")
    target = tiny_target("llama", hidden=64, heads=4, kv_heads=2, vocab=96)
    with pytest.raises(GumihoError, match="4-bit drafter"):
        random_drafter(target, "gumiho", seed=0, dtype="int4")
    assert not random_drafter(target, "gumiho", seed=0).int4
