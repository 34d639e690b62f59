"""A last-state drafter widened to fused target features, starting as the same function.

A drafter that reads the target's final-norm state h_i (``feature_layers=None``, as the
shipped ones do) conditions on ``fc(cat(embed(x_{i+1}), h_i))``. A fused drafter reads
``fuse(f_i)`` in place of h_i, with f_i = cat(g^{l_1}_i, ..., g^{l_k}_i) the target's
states after layers l_1..l_k (gumiho.drafter). When one of those layers is N, the last
of the target's N layers, its state g^N_i *is* h_i, so a fuse matrix that is the
identity on N's block and zero elsewhere,

    fuse = [0 ... 0  I  0 ... 0]        (k*H -> H; I in the columns of layer N)

gives fuse(f_i) = h_i exactly, and the widened drafter drafts token for token what the
last-state one did. Training then moves the zero blocks only as far as the other
layers help: continuing a drafter that took millions of tokens to train keeps what it
learnt and adds what the low and middle layers tell it, where training a fused one
from scratch would start over (and on a CPU's budget end below it).
"""
from __future__ import annotations

import copy
import dataclasses

import torch

from ..drafter import Drafter
from ..errors import GumihoError


def widen_to_fused(drafter: Drafter, layers: tuple, num_target_layers: int) -> Drafter:
    """A copy of the last-state ``drafter`` that reads the target's ``layers`` (which
    must include ``num_target_layers``, the final-norm state) and starts as the same
    function. The original is left as it is."""
    if drafter.cfg.feature_layers is not None:
        raise GumihoError(f"This drafter already reads fused layers {list(drafter.cfg.feature_layers)}; only a "
                          "drafter reading the target's last state is widened.")
    layers = tuple(layers)
    if num_target_layers not in layers:
        low_mid = [layer for layer in layers if layer != num_target_layers][:2] or [2]
        hint = ",".join(map(str, low_mid + [num_target_layers]))
        raise GumihoError(
            f"To continue a drafter that reads the target's last state with fused features, the layers must "
            f"include {num_target_layers} (the last of the target's {num_target_layers} layers, the state it "
            f"reads now), e.g. --feature-layers {hint}; got {list(layers)}.")
    cfg = dataclasses.replace(drafter.cfg, feature_layers=layers, extra=copy.deepcopy(drafter.cfg.extra))
    param = next(drafter.parameters())
    wide = Drafter(cfg).to(device=param.device, dtype=param.dtype)
    missing, unexpected = wide.load_state_dict(drafter.state_dict(), strict=False)
    if list(missing) != ["fuse.weight"] or unexpected:
        raise GumihoError(f"Cannot widen this drafter: its weights do not match (missing {missing}, "
                          f"unexpected {unexpected}).")
    h = cfg.hidden_size
    slot = layers.index(num_target_layers)
    with torch.no_grad():
        wide.fuse.weight.zero_()
        wide.fuse.weight[:, slot * h:(slot + 1) * h] = torch.eye(h, dtype=param.dtype, device=param.device)
    wide.train(drafter.training)
    return wide
