"""Weight-only 4-bit products for a drafter that drafts beside a 4-bit target on CPU.

On the llama.cpp runtime the target's one-token forward costs about 6-9 ms on two
cores, and the drafter's step (its two layers over the accepted tokens, its draft
head, its MLP heads) is a quarter of a speculative step. That step is bound by
reading the drafter's weights from memory: the target's forward has pushed them out
of the caches, so every product streams its whole weight. Four bits a weight instead
of sixteen is most of the saving (research/runtime_step.py measures it).

The format is PyTorch's own CPU int4 kernel (``_weight_int4pack_mm_for_cpu``): along
each weight row, groups of G = 32 inputs share one scale s and one offset m (GGUF
Q4_1's shape):

    s = (max - min) / 15,   q = round((w - min) / s) in 0..15,   w' = min + q s

The kernel stores the offset as z = min + 8 s and computes (q - 8) s + z, the same
w'. The rounding error is at most s / 2 per weight. Activations enter the kernel in
bfloat16 (its only vectorised input on CPU), so this is used only where the CPU has
bfloat16 instructions (AVX512-BF16: the kernel's AVX-512 path); elsewhere the
drafter keeps its packed float32 or bfloat16 products.

The 4-bit copy lives beside the module's ordinary weight, which stays: saving,
training and ``.to()`` see the drafter as it was, and any call the kernel does not
cover (autograd, another device, a weight changed since) takes the ordinary path.
What a 4-bit drafter proposes can differ a little from the full-precision one; what
the target accepts, and so the output, cannot (the target's verification decides).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn

from .cpulinear import PackedLinear, _stamp

GROUP = 32  # inputs per scale and offset
ROW_MULTIPLE = 16  # the kernel's packing takes output rows in multiples of 16
_AVAILABLE = None  # None: not checked yet


@dataclass(frozen=True)
class Int4Weight:
    """A weight [rows, in_features] in the kernel's packed layout: ``packed`` (rows
    padded to a multiple of 16), ``scales_zeros`` [in_features / 32, padded rows, 2]
    (bfloat16), ``rows`` the real output rows, and what it was made from (_stamp)."""

    packed: torch.Tensor
    scales_zeros: torch.Tensor
    rows: int
    stamp: tuple


def fits(weight: torch.Tensor) -> bool:
    """Whether ``weight`` can take the 4-bit layout: a 2-D CPU weight whose input
    width is a whole number of groups."""
    return (weight.dim() == 2 and weight.device.type == "cpu" and weight.shape[1] % GROUP == 0
            and weight.is_floating_point())


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The group-wise rounding of ``weight`` [n, k]: codes q [n, k] (int32, 0..15),
    scales s and offsets min [n, k/32] (float32). w' = min + q s (module docstring)."""
    n, k = weight.shape
    groups = weight.detach().float().reshape(n, k // GROUP, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = (high - low).clamp(min=1e-8) / 15
    codes = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32)
    return codes.reshape(n, k), scale, low


def dequantize(codes: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """w' = min + q s, the weight the 4-bit products multiply by (float32 [n, k])."""
    n, k = codes.shape
    groups = codes.reshape(n, k // GROUP, GROUP).float()
    return (low[..., None] + groups * scale[..., None]).reshape(n, k)


def quantize(weight: torch.Tensor) -> Int4Weight:
    """``weight`` [n, k] (k a multiple of 32) in the kernel's layout. Rows are padded
    to a multiple of 16 with copies of the first row; products drop them again."""
    n = weight.shape[0]
    pad = (-n) % ROW_MULTIPLE
    w = weight.detach()
    if pad:
        w = torch.cat([w, w[:1].expand(pad, -1)])
    codes, scale, low = quantize_groups(w)
    # The kernel's offsets: z = min + 8 s, since it computes (q - 8) s + z.
    scales_zeros = torch.stack([scale, low + 8 * scale], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    return Int4Weight(packed, scales_zeros, n, _stamp(weight))


def product(x: torch.Tensor, w: Int4Weight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., k] @ w'.T (+ bias), in x's dtype; x goes through the kernel in bfloat16."""
    rows = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, w.packed, GROUP, w.scales_zeros)
    if y.shape[-1] != w.rows:
        y = y[:, :w.rows]
    y = y.to(x.dtype).reshape(*x.shape[:-1], w.rows)
    return y if bias is None else y + bias.to(y.dtype)


def _kernel_works() -> bool:
    """The kernel runs here and agrees with the dequantised weight (a 40x64 weight:
    its rows are padded, its inputs are two groups)."""
    try:
        g = torch.Generator().manual_seed(0)
        weight = torch.randn(40, 64, generator=g)
        x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
        codes, scale, low = quantize_groups(weight)
        want = x.float() @ dequantize(codes, scale, low).T
        with torch.no_grad():
            got = product(x, quantize(weight)).float()
        return got.shape == want.shape and torch.allclose(got, want, atol=0.1, rtol=0.02)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def available() -> bool:
    """Whether 4-bit drafter products are used in this process: the CPU has bfloat16
    instructions (the kernel's fast path), the kernel agrees with its reference
    (checked once). A drafter loaded with another ``dtype`` (load_drafter) drafts without them."""
    global _AVAILABLE
    if _AVAILABLE is None:
        from .machine import cpu_has_native_bf16

        _AVAILABLE = cpu_has_native_bf16() and _kernel_works()
    return _AVAILABLE


def current(weight: torch.Tensor, made: Optional[Int4Weight]) -> Optional[Int4Weight]:
    """``made`` if it is still ``weight``'s 4-bit copy; else a new one (None when the
    weight cannot take the layout)."""
    if made is not None and made.stamp == _stamp(weight):
        return made
    if not fits(weight):
        return None
    with torch.no_grad():
        return quantize(weight)


class Int4Linear(PackedLinear):
    """A linear layer whose inference products go through its weight's 4-bit copy
    (made when the layer is switched, remade when the weight changes); with autograd,
    another device or a weight that does not fit, the packed or plain product."""

    _int4: Optional[Int4Weight] = None

    def forward(self, x):
        w = self.weight
        if x.device.type == "cpu" and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
            # Two threads remaking a stale copy at once make the same copy: no lock needed.
            made = current(w, self._int4)
            if made is not self._int4:
                self.__dict__["_int4"] = made
            if made is not None:
                return product(x, made, self.bias)
        return super().forward(x)

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_int4", None)
        return state


def int4_linears(module: nn.Module) -> nn.Module:
    """Switch every linear layer inside ``module`` to :class:`Int4Linear`, in place,
    and make the 4-bit copies now. A no-op where :func:`available` is false."""
    if not available():
        return module
    for m in module.modules():
        if type(m) in (nn.Linear, PackedLinear):
            m.__class__ = Int4Linear
            m.__dict__["_int4"] = current(m.weight, None)
    return module
