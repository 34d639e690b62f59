"""The Gumiho drafter: a small serial Transformer for the first draft positions and
parallel MLP heads for the later ones.

Notation used throughout (n = number of tokens the target has processed):

    h_i   the target's last hidden state at position i (after its final norm, the
          vector its LM head turns into logits for token i+1)
    x_i   the token at position i

The drafter's input at position i is ``fc(cat(embed(x_{i+1}), h_i))``: "the hidden
state at i, and the token that was chosen from it". From that it predicts h_{i+1},
whose logits (through the target's own LM head) give a guess for x_{i+2}.

Fused target features (EAGLE-3): with ``feature_layers = (l_1, ..., l_k)`` the
drafter reads, at the context positions the target has processed, the target's
hidden states after those layers, f_i = cat(g^{l_1}_i, ..., g^{l_k}_i) [k*H], and
replaces h_i above by ``fuse(f_i)`` (one linear layer k*H -> H). Layer index l
counts as transformers' ``hidden_states`` does: 0 is the embedding output, l the
output of decoder layer l, and N (the last of N layers) the final-norm state h_i
itself, so ``feature_layers=(N,)`` reads what the default drafter reads. Draft
positions beyond the context feed back the drafter's own H-wide outputs, as before:
only what the target produced is fused.

Draft position d (d = 1, 2, ...) is the d-th token after the last token the target
produced. With ``serial_positions = S`` and ``mlp_heads = M``:

* positions 1..S come from the serial Transformer, run S times autoregressively,
  each step feeding back its own predicted hidden state (EAGLE-style);
* positions S+1..S+M come from M independent MLP heads, all run at once from the
  last two serial inputs (Gumiho's parallel heads).

The same class gives the two ablations of the paper by configuration:
``kind="serial"`` (S = 7, M = 0, EAGLE-like) and ``kind="parallel"`` (S = 0, M = 7,
Medusa-like: every position from the target's own hidden state).

``kind="eagle3"`` is EAGLE-3 (arXiv 2503.01840) as vLLM's ``llama_eagle3`` loader
defines it: one decoder layer whose attention reads the token's embedding and the
state side by side (2H wide), the target's low, middle and high layers fused by one
linear layer, its own final norm and LM head over a reduced draft vocabulary, all
seven positions serial. At a context position, with ``e = embed(x_{i+1})`` and
``s = fuse(f_i)``:

    a   = attn(cat(input_layernorm(e), hidden_norm(s)))       (q, k, v read 2H)
    r   = s + a                  (hidden_norm(s) + a with norm_before_residual)
    out = r + mlp(post_attention_layernorm(r))
    logits = lm_head(norm(out))  over the draft vocabulary

and ``out`` (the state before the final norm) is what the next draft position reads
in place of ``s``. No ``fc`` over [embedding; state]: the layer takes both.

The token embedding and LM head belong to the target and stay frozen; they are
attached with :meth:`Drafter.attach_target` and are never saved with the drafter
(an eagle3 drafter keeps its own LM head and final norm, as EAGLE-3 does).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cpulinear import linear
from .checkpoint import compare_shapes, meta_shapes, safetensors_shapes, unreadable
from .errors import GumihoError

DRAFTER_KINDS = ("gumiho", "serial", "parallel", "eagle", "eagle3")
# Kinds with a final norm and an LM head of their own (over the draft vocabulary).
OWN_HEAD_KINDS = ("eagle3",)
# Kinds read from other projects' checkpoints only (gumiho.formats), never trained here.
IMPORTED_KINDS = ("medusa",)


@dataclass
class DrafterConfig:
    hidden_size: int
    vocab_size: int
    kind: str = "gumiho"
    serial_positions: int = 2
    mlp_heads: int = 5
    num_layers: int = 2
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: Optional[int] = None
    intermediate_size: Optional[int] = None
    mlp_blocks: int = 5  # residual SiLU blocks per MLP head, after the input block
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # Optional restricted draft vocabulary (FR-Spec): the drafter only ever proposes
    # these token ids. Keeps the LM-head cost of drafting small on CPU.
    draft_vocab_size: Optional[int] = None
    # Official checkpoints have no input norm on the first layer (see official.py).
    first_layer_input_norm: bool = True
    # Target layers whose hidden states are fused into the drafter's input (see the
    # module docstring); None: the final-norm hidden state alone (official checkpoints).
    feature_layers: Optional[tuple] = None
    # eagle3: the first layer's residual is the normed state (True) or the state itself
    # (False, vLLM's default for EAGLE-3 checkpoints; speculators' default is True).
    norm_before_residual: bool = False
    # Rotary scaling of an imported checkpoint (transformers' rope_scaling: linear or llama3); None: plain.
    rope_scaling: Optional[dict] = None
    target: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in DRAFTER_KINDS + IMPORTED_KINDS:
            raise GumihoError(f"Unknown drafter kind {self.kind!r}; use one of {DRAFTER_KINDS}.")
        # Sizes come from a config.json that may be hand-edited or hostile: a size that
        # is not a whole number would fail deep inside torch with a raw error.
        for name, lo in _SIZE_FIELDS:
            v = getattr(self, name)
            if v is None and name in _DERIVED_SIZES:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise GumihoError(f"Drafter setting {name} must be a whole number >= {lo}, got {v!r}; keep the "
                                  f"config.json saved with the drafter's weights.")
        for name in ("rms_norm_eps", "rope_theta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise GumihoError(f"Drafter setting {name} must be a number > 0, got {v!r}; keep the config.json "
                                  f"saved with the drafter's weights.")
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.intermediate_size is None:
            self.intermediate_size = int(self.hidden_size * 8 / 3)
        if self.serial_positions > 0 and self.num_layers < 1:
            raise GumihoError("A drafter with serial positions needs at least one Transformer layer.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise GumihoError("num_attention_heads must be a multiple of num_key_value_heads.")
        if self.rope_scaling is not None:
            _check_rope_scaling(self.rope_scaling)
        if self.feature_layers is not None:
            layers = self.feature_layers
            if (not isinstance(layers, (list, tuple)) or not layers
                    or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)
                    or len(set(layers)) != len(layers)):
                raise GumihoError(f"feature_layers must be distinct layer indices >= 0, got {layers!r}.")
            self.feature_layers = tuple(layers)

    @property
    def own_head(self) -> bool:
        """Whether the drafter has its own final norm and LM head (eagle3)."""
        return self.kind in OWN_HEAD_KINDS

    @property
    def medusa(self) -> bool:
        """Medusa-1 heads: residual blocks on the target's state, each head its own LM head."""
        return self.kind == "medusa"

    @property
    def feature_width(self) -> int:
        """Width of what the target hands the drafter per position: H, or k*H fused."""
        return self.hidden_size * (len(self.feature_layers) if self.feature_layers else 1)

    @classmethod
    def for_target(cls, target_config, kind: str = "gumiho", **overrides) -> "DrafterConfig":
        """A drafter sized from a target's HF config (the paper's choice: same width,
        same attention shape, two layers)."""
        text_cfg = getattr(target_config, "get_text_config", lambda: target_config)()
        rope = getattr(text_cfg, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(text_cfg, "rope_theta", 10000.0)) if isinstance(rope, dict) else 10000.0
        kw = dict(
            hidden_size=text_cfg.hidden_size,
            vocab_size=text_cfg.vocab_size,
            num_attention_heads=text_cfg.num_attention_heads,
            num_key_value_heads=getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads,
            head_dim=getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads,
            intermediate_size=getattr(text_cfg, "intermediate_size", None),
            rms_norm_eps=getattr(text_cfg, "rms_norm_eps", None) or 1e-6,
            rope_theta=float(theta),
        )
        kw.update(kind_layout(kind))
        if kind in OWN_HEAD_KINDS and "feature_layers" not in overrides:
            overrides = dict(overrides, feature_layers="default")  # EAGLE-3 reads three fused layers
        if overrides.get("feature_layers") == "default":
            overrides = dict(overrides, feature_layers=default_feature_layers(text_cfg.num_hidden_layers))
        kw.update(overrides)
        return cls(kind=kind, **kw)

    @property
    def max_depth(self) -> int:
        return self.serial_positions + self.mlp_heads

    @property
    def head_inputs(self) -> int:
        """How many serial inputs (H-wide each) the MLP heads read: the last two
        on the path, or only the root's when there is no serial step (parallel)."""
        return min(2, self.serial_positions + 1)

    def head_kind(self, position: int) -> str:
        """'serial' or 'mlp': which part of the drafter proposes draft position d."""
        return "serial" if position <= self.serial_positions else "mlp"


def _check_rope_scaling(scaling) -> None:
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else None
    if kind not in ROPE_SCALINGS:
        raise GumihoError(f"Unsupported rope_scaling {scaling!r}: the drafter reads {', '.join(ROPE_SCALINGS)}.")
    need = {"default": (), "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
    bad = [k for k in need if isinstance(scaling.get(k), bool) or not isinstance(scaling.get(k), (int, float))
           or not scaling[k] > 0]
    if bad or (kind == "llama3" and scaling["high_freq_factor"] <= scaling["low_freq_factor"]):
        raise GumihoError(f"rope_scaling {scaling!r} needs positive numbers {', '.join(need)} (llama3: high_freq_factor "
                          f"above low_freq_factor).")


_SIZE_FIELDS = (("hidden_size", 1), ("vocab_size", 1), ("serial_positions", 0), ("mlp_heads", 0), ("num_layers", 0),
                ("num_attention_heads", 1), ("num_key_value_heads", 1), ("head_dim", 1), ("intermediate_size", 1),
                ("mlp_blocks", 0), ("draft_vocab_size", 1))
_DERIVED_SIZES = ("head_dim", "intermediate_size", "draft_vocab_size")  # None: derived, or the whole vocabulary


def kind_layout(kind: str) -> dict:
    if kind == "gumiho":
        return dict(serial_positions=2, mlp_heads=5)
    if kind == "serial":
        return dict(serial_positions=7, mlp_heads=0)
    if kind == "parallel":
        return dict(serial_positions=0, mlp_heads=7, num_layers=0)
    if kind == "eagle":  # EAGLE-2, the baseline the paper compares with: one layer, all serial
        return dict(serial_positions=7, mlp_heads=0, num_layers=1)
    if kind == "eagle3":  # EAGLE-3: one layer reading [embedding; fused state], all serial
        return dict(serial_positions=7, mlp_heads=0, num_layers=1)
    raise GumihoError(f"Unknown drafter kind {kind!r}; use one of {DRAFTER_KINDS}.")


def default_feature_layers(num_layers: int) -> tuple:
    """EAGLE-3's low, middle and high layers of an N-layer target: 2, N//2 and N-3
    (in ``hidden_states`` numbering; for small N, distinct layers within 1..N)."""
    picks = sorted({min(max(i, 1), num_layers) for i in (2, num_layers // 2, num_layers - 3)})
    return tuple(picks)


# ----------------------------------------------------------------------------- layers


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


ROPE_SCALINGS = ("default", "linear", "llama3")


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


class GrowingKV:
    """One layer's keys and values while drafting, kept in buffers [B, kv heads, cap,
    head_dim] with room to grow, so that attending over the context appends in place
    instead of concatenating it into new tensors at every call.

    Entries ``[0, length)`` are the accepted context. ``append`` writes at ``end`` and
    returns views of ``[0, end)``; draft-tree rows appended after the context stay
    until ``rewind`` (``end = length``), and ``commit`` makes what was appended part
    of the context."""

    def __init__(self):
        self.k = self.v = None
        self.length = 0
        self.end = 0

    def rewind(self):
        self.end = self.length

    def commit(self):
        self.length = self.end

    def append(self, k: torch.Tensor, v: torch.Tensor):
        n, t = self.end, k.shape[2]
        if (self.k is None or n + t > self.k.shape[2] or self.k.shape[:2] != k.shape[:2] or self.k.dtype != k.dtype
                or (self.k.is_inference() and not torch.is_inference_mode_enabled())):  # then it cannot be written
            cap = max(256, 2 * (n + t))
            bk = k.new_empty(k.shape[0], k.shape[1], cap, k.shape[3])
            bv = v.new_empty(v.shape[0], v.shape[1], cap, v.shape[3])
            if n:
                bk[:, :, :n] = self.k[:, :, :n]
                bv[:, :, :n] = self.v[:, :, :n]
            self.k, self.v = bk, bv
        self.k[:, :, n:n + t] = k
        self.v[:, :, n:n + t] = v
        self.end = n + t
        return self.k[:, :, :self.end], self.v[:, :, :self.end]

    def context(self):
        """(k, v) of the accepted context, [B, kv heads, length, head_dim] views."""
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


class Attention(nn.Module):
    def __init__(self, cfg: DrafterConfig, in_features: Optional[int] = None):
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
    def __init__(self, cfg: DrafterConfig, index: int):
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

    def __init__(self, cfg: DrafterConfig):
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


def mlp_head(cfg: DrafterConfig) -> nn.Sequential:
    h = cfg.hidden_size
    if cfg.medusa:  # Medusa-1: residual blocks only, on the target's state
        return nn.Sequential(*[SiLUBlock(h, h, residual=True) for _ in range(cfg.mlp_blocks)])
    blocks = [SiLUBlock(h * cfg.head_inputs, h, residual=False)]
    blocks += [SiLUBlock(h, h, residual=True) for _ in range(cfg.mlp_blocks)]
    return nn.Sequential(*blocks)


# ----------------------------------------------------------------------------- drafter


class Drafter(nn.Module):
    """Hybrid serial/parallel drafter. See the module docstring for the notation."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        n_draft = cfg.draft_vocab_size or cfg.vocab_size
        # fc(cat(embedding, state)); eagle3 has none: its first layer reads both.
        self.fc = None if cfg.own_head or cfg.medusa else nn.Linear(2 * h, h, bias=True)
        # Fused target features -> one H-wide state (only with feature_layers).
        self.fuse = nn.Linear(cfg.feature_width, h, bias=False) if cfg.feature_layers else None
        self.layers = nn.ModuleList([Eagle3FirstLayer(cfg) if cfg.own_head and i == 0 else DecoderLayer(cfg, i)
                                     for i in range(cfg.num_layers)])
        self.heads = nn.ModuleList([mlp_head(cfg) for _ in range(cfg.mlp_heads)])
        # eagle3's own final norm and LM head over the draft vocabulary.
        self.norm = RMSNorm(h, cfg.rms_norm_eps) if cfg.own_head else None
        self.lm_head = nn.Linear(h, n_draft, bias=False) if cfg.own_head else None
        # Medusa-1: one LM head per head, over the whole vocabulary.
        self.lm_heads = (nn.ModuleList([nn.Linear(h, cfg.vocab_size, bias=False) for _ in range(cfg.mlp_heads)])
                         if cfg.medusa else None)
        # Restricted draft vocabulary: ids of the tokens the drafter may propose.
        self.register_buffer("draft_vocab_ids", torch.arange(n_draft, dtype=torch.long), persistent=True)
        # The target's frozen pieces, attached later and never saved with the drafter.
        self._embed: Optional[nn.Embedding] = None
        self._lm_head_weight: Optional[torch.Tensor] = None
        self._draft_head_weight: Optional[torch.Tensor] = None

    # -- target pieces -------------------------------------------------------------

    def attach_target(self, target_model) -> "Drafter":
        """Borrow the target's token embedding and LM head (frozen, not copied)."""
        emb = target_model.get_input_embeddings()
        head = target_model.get_output_embeddings()
        if emb.weight.shape[-1] != self.cfg.hidden_size:
            raise GumihoError(
                f"Drafter hidden size {self.cfg.hidden_size} does not match the target's "
                f"{emb.weight.shape[-1]}: this drafter was trained for another model "
                f"({self.cfg.target or 'unknown'}). Train one for this target with `python -m gumiho.train`."
            )
        if head.weight.shape[0] != self.cfg.vocab_size:
            raise GumihoError(
                f"Drafter vocabulary {self.cfg.vocab_size} does not match the target's "
                f"{head.weight.shape[0]}: this drafter was trained for another model "
                f"({self.cfg.target or 'unknown'}). Train one for this target with `python -m gumiho.train`."
            )
        layers = self.cfg.feature_layers
        n_layers = getattr(getattr(target_model.config, "get_text_config", lambda: target_model.config)(),
                           "num_hidden_layers", None)
        if layers and isinstance(n_layers, int) and max(layers) > n_layers:
            raise GumihoError(
                f"This drafter reads the target's layers {list(layers)}, but the target has only {n_layers} "
                f"layers: it was trained for another model ({self.cfg.target or 'unknown'}).")
        # Plain attributes (not submodules): not trained, not saved, not moved by .to().
        object.__setattr__(self, "_embed", emb)
        self._lm_head_weight = head.weight.detach()
        self._refresh_draft_head()
        return self

    def _refresh_draft_head(self):
        """The rows of the target's LM head that the drafter may propose, in the
        drafter's own dtype (a bfloat16 drafter on a float32 target reads half the
        bytes per draft step). Kept in step with set_draft_vocab and .to()."""
        if self._lm_head_weight is not None:
            rows = self._lm_head_weight[self.draft_vocab_ids.to(self._lm_head_weight.device)]
            self._draft_head_weight = rows.to(self.weight_dtype).contiguous()

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._refresh_draft_head()
        return out

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype the drafter computes in (its first parameter's)."""
        return next(self.parameters()).dtype

    @property
    def weight_device(self) -> torch.device:
        return next(self.parameters()).device

    def ready_for(self, target, dtype: Optional[torch.dtype] = None) -> "Drafter":
        """An imported drafter made ready to draft for ``target`` (a loaded Target): on
        its device, in ``dtype`` (default: the target's on CUDA, float32 on CPU),
        frozen, attached."""
        if dtype is None:
            dtype = target.dtype if target.device.type == "cuda" else torch.float32
        model = self.to(device=target.device, dtype=dtype).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        return model.attach_target(target.model)

    def init_own_head(self, target_model) -> None:
        """An eagle3 drafter's final norm and LM head started from the target's: its
        final norm's weight, and the rows of its LM head for the draft vocabulary (a
        drafter whose output matched the target's last residual state would then give
        the target's logits)."""
        if not self.cfg.own_head:
            return
        self._require_target()
        with torch.no_grad():
            self.lm_head.weight.copy_(self._lm_head_weight[self.draft_vocab_ids.to(self._lm_head_weight.device)])
            final_norm = getattr(getattr(target_model, "model", None), "norm", None)
            if final_norm is not None and getattr(final_norm, "weight", None) is not None:
                self.norm.weight.copy_(final_norm.weight.detach())

    def _require_target(self):
        if self._embed is None:
            raise GumihoError("Call drafter.attach_target(target_model) before drafting.")

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        self._require_target()
        with torch.no_grad():
            return self._embed(ids).to(self.weight_dtype)

    def full_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the whole vocabulary (training: match the target's distribution)."""
        self._require_target()
        return hidden.to(self._lm_head_weight.dtype) @ self._lm_head_weight.T

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary only; index into ``draft_vocab_ids``: the
        target's LM head rows, or an eagle3 drafter's own norm and LM head."""
        self._require_target()
        if self.cfg.own_head:
            return linear(self.norm(hidden.to(self.weight_dtype)), self.lm_head.weight)
        return linear(hidden.to(self._draft_head_weight.dtype), self._draft_head_weight)

    def head_logits(self, head_out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of the MLP heads' outputs [.., n heads, H] ->
        [.., n heads, V']: through the draft head, or each Medusa head's own."""
        if self.lm_heads is None:
            return self.draft_logits(head_out)
        return torch.stack([linear(head_out[..., j, :].to(self.weight_dtype), lm.weight)
                            for j, lm in enumerate(self.lm_heads[:head_out.shape[-2]])], dim=-2)

    def train_logits(self, pred: torch.Tensor) -> torch.Tensor:
        """Float32 draft-vocabulary logits of predicted states, with autograd (training)."""
        if self.cfg.own_head:
            return self.lm_head(self.norm(pred.to(self.weight_dtype))).float()
        return pred.float() @ self._draft_head_weight.float().T

    def set_draft_vocab(self, ids: torch.Tensor):
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if self.cfg.own_head:
            # In id order, as EAGLE-3's offset map (d2t) is usually built: export is then a renaming.
            ids = ids.sort().values
        self.cfg.draft_vocab_size = int(ids.numel())
        self.draft_vocab_ids = ids.to(self.weight_device)
        if self.cfg.own_head and self.lm_head.weight.shape[0] != ids.numel():
            # A new draft vocabulary is a new LM head (started from the target's rows, when attached).
            self.lm_head = nn.Linear(self.cfg.hidden_size, int(ids.numel()), bias=False).to(
                device=self.weight_device, dtype=self.weight_dtype)
        self._refresh_draft_head()

    # -- pieces of the forward -------------------------------------------------------

    def project(self, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """fc(cat(embed(x_{i+1}), h_i)): the drafter's input for one position (eagle3:
        the concatenation itself, 2H wide, which its first layer reads)."""
        if self.cfg.medusa:  # Medusa's heads read the target's state alone
            return hidden.to(self.weight_dtype)
        joined = torch.cat([self.embed(next_ids), hidden.to(self.weight_dtype)], dim=-1)
        return joined if self.fc is None else self.fc(joined)

    def fuse_features(self, states: torch.Tensor) -> torch.Tensor:
        """What the target handed over for context positions ([.., feature_width]: the
        final-norm state, or the fused layers' states) -> the H-wide state the drafter
        conditions on (the fused projection, or the final-norm state unchanged)."""
        if states.shape[-1] != self.cfg.feature_width:
            raise GumihoError(f"The drafter expects target states {self.cfg.feature_width} wide "
                              f"(feature_layers={self.cfg.feature_layers}), got {states.shape[-1]}.")
        states = states.to(self.weight_dtype)
        return self.fuse(states) if self.fuse is not None else states

    def project_context(self, states: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """The drafter's input at a position the target has processed: ``project`` of
        the (fused) target state there."""
        return self.project(self.fuse_features(states), next_ids)

    def transformer(self, x, positions, mask, past=None):
        """Run the serial layers. x [B,T,H], positions [B or 1,T], mask [.,1,T,P+T].
        ``past``: per layer, (k, v) of the P earlier positions, or a GrowingKV that
        these positions are appended to. Returns output and per-layer new (k, v) of
        these T positions."""
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype, self.cfg.rope_scaling)
        new = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, mask, None if past is None else past[i])
            new.append(kv)
        return x, new

    def run_heads(self, head_input: torch.Tensor, count: Optional[int] = None) -> list[torch.Tensor]:
        """The MLP heads on one input: [.., head_inputs*H] -> list of predicted hidden
        states, one per head; only the first ``count`` heads where given (a tree
        shallower than the drafter reaches needs no more, and each head costs a pass
        over its weights)."""
        return [head(head_input) for head in self.heads[:count]]

    # -- bookkeeping -----------------------------------------------------------------

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, folder: str, dtype: Optional[torch.dtype] = None):
        from safetensors.torch import save_file

        os.makedirs(folder, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if dtype is not None:
            state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state.items()}
        tmp = os.path.join(folder, "model.safetensors.tmp")
        save_file(state, tmp, metadata={"format": "pt"})
        os.replace(tmp, os.path.join(folder, "model.safetensors"))
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(asdict(self.cfg), f, indent=2)

    @classmethod
    def load(cls, folder: str, device="cpu", dtype=torch.float32) -> "Drafter":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        cfg_path = os.path.join(folder, "config.json")
        w_path = os.path.join(folder, "model.safetensors")
        if not os.path.isdir(folder):
            raise GumihoError(f"Drafter folder {folder!r} does not exist.")
        if not os.path.exists(cfg_path) or not os.path.exists(w_path):
            raise GumihoError(
                f"Drafter folder {folder!r} must hold config.json and model.safetensors "
                f"(for an official Gumiho checkpoint with pytorch_model.bin, use gumiho.official)."
            )
        try:
            with open(cfg_path) as f:
                raw = json.load(f)
            if not isinstance(raw, dict):
                raise TypeError("the file does not hold a JSON object")
            if isinstance(raw.get("feature_layers"), list):
                raw["feature_layers"] = tuple(raw["feature_layers"])
            known = {f.name for f in fields(DrafterConfig)}
            missing = [k for k in ("hidden_size", "vocab_size") if k not in raw]
            extra = sorted(k for k in raw if k not in known)
            if missing or extra:  # said in words, not as Python's missing-argument error
                raise GumihoError(f"Drafter config {cfg_path!r} is not valid: "
                                  + (f"it lacks {', '.join(missing)}" if missing else "")
                                  + ("; " if missing and extra else "")
                                  + (f"it has settings a drafter config does not have: {', '.join(extra[:6])}"
                                     if extra else "") + ". Keep the config.json saved with the drafter's weights.")
            cfg = DrafterConfig(**raw)
        except GumihoError:
            raise
        except (ValueError, TypeError) as e:  # not JSON (binary, bad UTF-8), or fields a config does not have
            raise GumihoError(f"Drafter config {cfg_path!r} is not valid: {str(e)[:200]}") from None
        # The weights' names and shapes (the file's header) against a model built on the
        # meta device from the config: a mismatch, or a config sized far beyond its
        # weights, is refused before any memory is allocated for it.
        with torch.device("meta"):
            model = cls(cfg)
        compare_shapes(meta_shapes(model), safetensors_shapes(w_path), f"The drafter weights file {w_path!r}",
                       "Keep the config.json saved with these weights (or save the drafter again).")
        try:
            state = load_file(w_path, device="cpu")
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise unreadable(w_path, e, "download or train it again") from None
        # assign: the parameters become the loaded tensors (the meta ones have no storage).
        model.load_state_dict(state, strict=True, assign=True)
        model.draft_vocab_ids = model.draft_vocab_ids.long()
        return model.to(device=device, dtype=dtype).eval()


def causal_mask(t: int, past: int, device) -> torch.Tensor:
    """[1,1,t,past+t] bool: position i of the new block sees all of the past and
    new positions <= i."""
    m = torch.ones(t, past + t, dtype=torch.bool, device=device)
    m[:, past:] = torch.tril(m[:, past:])
    return m[None, None]

