"""The drafter's building blocks: RMS norm, rotary embeddings (with the scalings of
imported long-context checkpoints), attention over a growing KV cache, the decoder
layers (the plain one and EAGLE-3's first layer, which reads [embedding; state]),
and the SiLU blocks the MLP heads are made of. Notation: gumiho.drafter."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv import GrowingKV

# The layers' ``cfg`` is the drafter's DrafterConfig (gumiho.drafter.config), named, not
# imported: the config imports the kinds, which import these layers.


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)



def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[dict] = None, device=None) -> torch.Tensor:
    """The rotary frequencies theta^(-2j/head_dim), j < head_dim/2, rescaled as a
    checkpoint's ``rope_scaling`` says (imported drafters for long-context targets):

    * linear (factor f): every frequency / f, i.e. positions read as p / f;
    * llama3 (factor f, low/high frequency factors l, h, original context C): with
      wavelength w = 2 pi / freq, a frequency is divided by f where w > C / l (slow
      components), kept where w < C / h (fast ones), and in between blended,
      (1 - a) freq / f + a freq, a = (C / w - l) / (h - l)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    context = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * torch.pi / inv
    blend = ((context / wavelen - low) / (high - low)).clamp(0, 1)
    mixed = (1 - blend) * inv / factor + blend * inv
    return torch.where(wavelen > context / low, inv / factor, torch.where(wavelen < context / high, inv, mixed))


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype, scaling: Optional[dict] = None):
    """Rotary tables for integer positions [..., T] -> cos, sin [..., T, head_dim]."""
    inv = rope_inv_freq(head_dim, theta, scaling, positions.device)
    ang = positions.float()[..., None] * inv
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin



class Attention(nn.Module):
    def __init__(self, cfg, in_features: Optional[int] = None):
        super().__init__()
        self.cfg = cfg
        h, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        d_in = in_features or h  # EAGLE-3's first layer reads 2H
        self.q_proj = nn.Linear(d_in, nh * hd, bias=False)
        self.k_proj = nn.Linear(d_in, nkv * hd, bias=False)
        self.v_proj = nn.Linear(d_in, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)

    def forward(self, x, cos, sin, mask, past_kv=None):
        """x [B, T, H]; mask [B or 1, 1, T, past+T] bool (True = may attend).
        Returns output and this call's (k, v) so the caller decides what to keep."""
        b, t, _ = x.shape
        cfg = self.cfg
        q = self.q_proj(x).view(b, t, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos[:, None], sin[:, None]), apply_rope(k, cos[:, None], sin[:, None])
        new_kv = (k, v)
        if isinstance(past_kv, GrowingKV):
            k, v = past_kv.append(k, v)
        elif past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)
            v = torch.cat([past_kv[1], v], dim=2)
        rep = cfg.num_attention_heads // cfg.num_key_value_heads
        if rep > 1 and torch.is_grad_enabled():
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        elif rep > 1:  # no autograd: the kernel shares each key/value head with its query heads, no copies
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), new_kv
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), new_kv


class DecoderLayer(nn.Module):
    def __init__(self, cfg, index: int):
        super().__init__()
        # The official Gumiho/EAGLE drafters skip the first layer's input norm: its
        # input is already the fc projection, not a residual stream.
        use_norm = index > 0 or cfg.first_layer_input_norm
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if use_norm else nn.Identity()
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x, cos, sin, mask, past_kv=None):
        a, new_kv = self.self_attn(self.input_layernorm(x), cos, sin, mask, past_kv)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, new_kv


class Eagle3FirstLayer(nn.Module):
    """EAGLE-3's first decoder layer (module docstring): its input is [embedding;
    state] side by side, 2H wide, and attention reads both; the residual stream
    starts from the state. Names as in the EAGLE-3 checkpoints, so that the layouts
    of gumiho.formats map onto it one to one."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden_size
        self.hidden_size = h
        self.norm_before_residual = cfg.norm_before_residual
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)  # of the token embedding
        self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)  # of the state
        self.self_attn = Attention(cfg, in_features=2 * h)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)

    def forward(self, x, cos, sin, mask, past_kv=None):
        emb, state = x.split(self.hidden_size, dim=-1)
        normed = self.hidden_norm(state)
        residual = normed if self.norm_before_residual else state
        a, new_kv = self.self_attn(torch.cat([self.input_layernorm(emb), normed], dim=-1), cos, sin, mask, past_kv)
        x = residual + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, new_kv


class SwiGLU(nn.Module):
    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SiLUBlock(nn.Module):
    """``act(linear(x))``, plus ``x`` when residual. Zero-initialised weights make a
    residual block start as the identity, so a fresh head passes its input through."""

    def __init__(self, d_in: int, d_out: int, residual: bool):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.residual = residual and d_in == d_out
        if self.residual:
            nn.init.zeros_(self.linear.weight)

    def forward(self, x):
        y = F.silu(self.linear(x))
        return x + y if self.residual else y

