"""Tree-verify attention without copying the KV cache per query head group.

transformers' SDPA path handles grouped-query attention (fewer key/value heads than
query heads) by letting the kernel share the key/value heads when there is no
mask, or when a single token is decoded. A verify forward has both a mask and
several query tokens, and there it copies every layer's whole key/value cache once
per query head of a group (``repeat_kv``), which on a CPU costs more than the
attention itself once the context holds a few hundred tokens.

``use_tree_attention(model)`` switches a model that uses "sdpa" to the attention
function registered here: the same SDPA call, with the kernel sharing the
key/value heads (``enable_gqa``) in that case too; the results are the same. Every
other case goes to transformers' own SDPA function unchanged.
"""
from __future__ import annotations

import torch.nn.functional as F

NAME = "gumiho_sdpa"
_REGISTERED = False


def tree_sdpa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is not None and attention_mask.dim() == 4 and query.shape[2] > 1
            and getattr(module, "num_key_value_groups", 1) > 1 and query.device.type == "cpu"
            and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
            and not kwargs.get("output_attentions", False)):
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                             scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def _register() -> bool:
    global _REGISTERED
    if not _REGISTERED:
        try:
            from transformers import AttentionInterface
            from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
        except ImportError:
            return False
        AttentionInterface.register(NAME, tree_sdpa_forward)
        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
        _REGISTERED = True
    return True


def use_tree_attention(model) -> bool:
    """Switch ``model`` from "sdpa" to the tree-verify attention above, in place.
    Returns whether it did (models on another implementation are left alone)."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "_attn_implementation", None) != "sdpa" or getattr(cfg, "sub_configs", None):
        return False
    can = getattr(model, "_can_set_attn_implementation", None)
    if can is None or not can() or not _register():
        return False
    try:
        model.set_attn_implementation(NAME)
    except (KeyError, ValueError, ImportError):
        return False
    return cfg._attn_implementation == NAME
