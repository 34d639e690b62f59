"""Faster float32 linear layers on CPU, for the small row counts of decoding.

A verify forward multiplies a handful of rows (the tree's nodes) by every weight
matrix of the target. The default CPU matmul re-arranges ("packs") the whole
weight matrix on every call, which for a few rows costs more than the product
itself: on a 2-core CPU a forward over a 25-node tree took over 3x a one-token
forward, mostly packing. oneDNN can pack a weight once and reuse it, which makes
a many-row product cost little more than a one-row one.

``pack_linears(model)`` turns the model's ``nn.Linear`` layers into
:class:`PackedLinear` (same parameters, same state dict, same results up to
float32 rounding). The packed copy of a weight is made on first use and made
again if the weight changes; it lives outside the module, so copying, pickling
and saving are unaffected. Anything the packed kernel does not cover (another
device or dtype, autograd through the layer, a build without oneDNN) takes the
ordinary ``F.linear`` path. ``GUMIHO_PACKED_LINEAR=0`` turns it off.
"""
from __future__ import annotations

import os
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

_PACKED = WeakIdKeyDictionary()  # weight tensor -> (weight version, packed weight)
_LOCK = threading.Lock()
_AVAILABLE = None  # None: not checked yet


def available() -> bool:
    """Whether the packed kernel works in this process (checked once, against F.linear)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        ok = os.environ.get("GUMIHO_PACKED_LINEAR", "1").strip().lower() not in ("0", "false", "no", "off")
        if ok:
            try:
                ops = torch.ops.mkldnn
                g = torch.Generator().manual_seed(0)
                w, b = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
                x = torch.randn(2, 3, 16, generator=g)
                with torch.no_grad():
                    y = ops._linear_pointwise(x, ops._reorder_linear_weight(w, 16), b, "none", [], "")
                ok = torch.backends.mkldnn.is_available() and torch.allclose(y, F.linear(x, w, b), atol=1e-4)
            except (AttributeError, RuntimeError, NotImplementedError):
                ok = False
        _AVAILABLE = ok
    return _AVAILABLE


def _usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.dtype == torch.float32 and weight.dtype == torch.float32 and x.device.type == "cpu"
            and weight.device.type == "cpu" and weight.dim() == 2 and x.numel() > 0
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and available())


def _version(weight: torch.Tensor) -> int:
    """The weight's version counter, bumped by in-place changes (tensors made in
    inference mode have none, and can only change inside it: -1)."""
    return -1 if weight.is_inference() else weight._version


def _packed(weight: torch.Tensor) -> torch.Tensor:
    entry = _PACKED.get(weight)
    version = _version(weight)
    if entry is None or entry[0] != version:
        with torch.no_grad():
            entry = (version, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 16))
        with _LOCK:
            _PACKED[weight] = entry
    return entry[1]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, through the packed kernel where it applies."""
    if _usable(x, weight) and (bias is None or (bias.dtype == torch.float32 and bias.device.type == "cpu")):
        return torch.ops.mkldnn._linear_pointwise(x, _packed(weight), bias, "none", [], "")
    return F.linear(x, weight, bias)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward goes through :func:`linear`. It remembers its
    packed weight (and the weight version it was packed from) to skip the look-up
    on the next call; copies and pickles leave that out."""

    _pk = None  # (weight, weight version, packed weight)

    def forward(self, x):
        w, pk = self.weight, self._pk
        if (pk is not None and pk[0] is w and pk[1] == _version(w) and x.dtype == torch.float32
                and x.device.type == "cpu" and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return torch.ops.mkldnn._linear_pointwise(x, pk[2], self.bias, "none", [], "")
        if _usable(x, w) and (self.bias is None or (self.bias.dtype == torch.float32 and self.bias.device.type == "cpu")):
            packed = _packed(w)
            self.__dict__["_pk"] = (w, _version(w), packed)
            return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")
        return F.linear(x, w, self.bias)

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state.pop("_pk", None)
        return state


def pack_linears(module: nn.Module, prepack: bool = True) -> nn.Module:
    """Make every plain ``nn.Linear`` inside ``module`` a :class:`PackedLinear`, in
    place (parameters, hooks and state dict are kept), and with ``prepack`` pack the
    float32 CPU weights now rather than on first use. A no-op when the packed kernel
    is unavailable or turned off."""
    if not available():
        return module
    for m in module.modules():
        if type(m) is nn.Linear:
            m.__class__ = PackedLinear
        if prepack and type(m) is PackedLinear and m.weight.dtype == torch.float32 and m.weight.device.type == "cpu":
            _packed(m.weight)
    return module


def unpack_linears(module: nn.Module) -> nn.Module:
    """Undo :func:`pack_linears`."""
    for m in module.modules():
        if type(m) is PackedLinear:
            m.__class__ = nn.Linear
    return module
