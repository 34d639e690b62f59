"""Faster linear layers on CPU, for the small row counts of decoding.

A verify forward multiplies a handful of rows (the tree's nodes) by every weight
matrix of the target. The default CPU matmul re-arranges ("packs") the whole
weight matrix on every call, which for a few rows costs more than the product
itself: on a 2-core CPU a forward over a 25-node tree took over 3x a one-token
forward, mostly packing. oneDNN can pack a weight once and reuse it, which makes
a many-row product cost little more than a one-row one.

``pack_linears(model)`` turns the model's ``nn.Linear`` layers into
:class:`PackedLinear` (same parameters, same state dict, same results up to
float32 rounding). A layer keeps its weight's packed copy itself, made at
packing (or on first use) and made again if the weight changes; copying,
pickling and saving leave it out. A weight that is not a layer's (the drafter's
rows of the target's LM head) is packed by the :class:`PackedWeight` that its
owner keeps beside it. No packed copy lives anywhere but with its owner. Anything the packed kernel does not cover (another
device or dtype, autograd through the layer, a build without oneDNN) takes the
ordinary ``F.linear`` path. ``load_target(packed=False)`` leaves a target unpacked.

bfloat16 weights take the packed kernel too, where the CPU multiplies bf16 in
hardware (AVX512-BF16, AMX; see gumiho.kernels.machine). That is for the drafter: drafting
reads every drafter weight from memory on every step (the target's forward has
pushed them out of the caches), so half the bytes is most of the saving, and the
drafter's precision changes only what it proposes, never what the target accepts.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_AVAILABLE = None  # None: not checked yet
_AVAILABLE_BF16 = None


def _kernel_works(dtype: torch.dtype, **tolerance) -> bool:
    """Whether the packed kernel runs on ``dtype`` here and agrees with F.linear in
    float32 within ``tolerance``."""
    try:
        ops = torch.ops.mkldnn
        g = torch.Generator().manual_seed(0)
        w, b = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
        x = torch.randn(2, 3, 16, generator=g)
        w, b, x = w.to(dtype), b.to(dtype), x.to(dtype)
        with torch.no_grad():
            y = ops._linear_pointwise(x, ops._reorder_linear_weight(w, 16), b, "none", [], "")
        return (torch.backends.mkldnn.is_available() and y.dtype == dtype
                and torch.allclose(y.float(), F.linear(x.float(), w.float(), b.float()), **tolerance))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def available() -> bool:
    """Whether the packed kernel works in this process (checked once, against F.linear)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = _kernel_works(torch.float32, atol=1e-4)
    return _AVAILABLE


def available_bf16() -> bool:
    """Whether bfloat16 weights take the packed kernel: it works here (checked once,
    against F.linear in float32) and the CPU has bf16 matrix instructions, without
    which oneDNN emulates bf16 and a float32 product is the faster one."""
    global _AVAILABLE_BF16
    if _AVAILABLE_BF16 is None:
        from .machine import cpu_has_native_bf16

        _AVAILABLE_BF16 = available() and cpu_has_native_bf16() and _kernel_works(torch.bfloat16, atol=0.1,
                                                                                    rtol=0.02)
    return _AVAILABLE_BF16


def _kernel_takes(dtype: torch.dtype) -> bool:
    """Whether the packed kernel is used for this dtype: float32, and bfloat16 where native."""
    return available() if dtype == torch.float32 else dtype == torch.bfloat16 and available_bf16()


def _usable(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    return (x.dtype == weight.dtype and x.device.type == "cpu"
            and weight.device.type == "cpu" and weight.dim() == 2 and x.numel() > 0
            and (bias is None or (bias.dtype == x.dtype and bias.device.type == "cpu"))
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and _kernel_takes(x.dtype))


def _version(weight: torch.Tensor) -> int:
    """The weight's version counter, bumped by in-place changes (tensors made in
    inference mode have none, and can only change inside it: -1)."""
    return -1 if weight.is_inference() else weight._version


def _stamp(weight: torch.Tensor) -> tuple:
    """What a packed copy was made from: the weight's version, its storage and dtype.
    ``module.to(dtype)`` swaps a parameter's data without making a new Parameter or
    bumping its version, so the version alone would keep serving the old packing."""
    return _version(weight), weight.data_ptr(), weight.dtype


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in the kernel's packed layout (a new copy)."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 16)


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedWeight:
    """A weight matrix that is not a layer's, and its packed copy: calling it is
    ``F.linear(x, weight, bias)``, through the packed kernel where it applies. The
    copy is made on first use and made again when the weight changes (_stamp).
    Two threads remaking a stale copy at once make the same copy: no lock needed."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self._pk = None  # (the weight's _stamp, packed weight)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        w = self.weight
        if not _usable(x, w, bias):
            return F.linear(x, w, bias)
        pk, stamp = self._pk, _stamp(w)
        if pk is None or pk[0] != stamp:
            pk = self._pk = (stamp, _pack(w))
        return _packed_product(x, pk[1], bias)

    def __getstate__(self):
        return {"weight": self.weight, "_pk": None}


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward goes through the packed kernel where it
    applies. It keeps its packed weight (and what it was packed from, see _stamp),
    made again when the weight changes; copies and pickles leave that out."""

    _pk = None  # (weight, its _stamp, packed weight)

    def forward(self, x):
        w, pk = self.weight, self._pk
        if (pk is not None and pk[0] is w and pk[1] == _stamp(w) and x.dtype == w.dtype
                and x.device.type == "cpu" and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return _packed_product(x, pk[2], self.bias)
        if _usable(x, w, self.bias):
            packed = _pack(w)
            self.__dict__["_pk"] = (w, _stamp(w), packed)
            return _packed_product(x, packed, self.bias)
        return F.linear(x, w, self.bias)

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state.pop("_pk", None)
        return state


def pack_linears(module: nn.Module, prepack: bool = True) -> nn.Module:
    """Make every plain ``nn.Linear`` inside ``module`` a :class:`PackedLinear`, in
    place (parameters, hooks and state dict are kept), and with ``prepack`` pack the
    CPU weights the kernel takes (float32; bfloat16 where the CPU has it) now rather
    than on first use. A no-op when the packed kernel is unavailable or turned off."""
    if not available():
        return module
    for m in module.modules():
        if type(m) is nn.Linear:
            m.__class__ = PackedLinear
        if prepack and type(m) is PackedLinear and m.weight.device.type == "cpu" and _kernel_takes(m.weight.dtype):
            m.__dict__["_pk"] = (m.weight, _stamp(m.weight), _pack(m.weight))
    return module


def full_precision_product(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` in the layer's own precision: through its packed copy where it
    is a PackedLinear, never through a 4-bit copy (gumiho.kernels.int4linear) that
    a 4-bit drafter's layers carry. The drafter's own LM heads draft this way."""
    if isinstance(layer, PackedLinear):
        return PackedLinear.forward(layer, x)
    return F.linear(x, layer.weight, layer.bias)

