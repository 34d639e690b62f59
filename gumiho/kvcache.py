"""Keeping only the accepted path in the target's KV cache.

After a verify forward the cache holds P entries of context followed by T entries
for the tree nodes, in tree order. Only the root and the accepted nodes belong to
the sequence; the rest are dropped and the kept ones moved into place, so the
cache equals the one a token-by-token decoder would have built.
"""
from __future__ import annotations

import torch


def cache_layers(cache):
    """The per-layer objects holding `keys`/`values` [B, heads, S, D]."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"Unsupported cache type {type(cache).__name__}: expected a transformers DynamicCache.")
    return layers


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def keep_tree_entries(cache, past_len: int, kept_nodes: list[int]):
    """Keep cache[:past_len] and the entries of tree nodes ``kept_nodes`` (indices
    into the tree, root = 0), in that order; drop every other tree entry."""
    for layer in cache_layers(cache):
        keys, values = layer.keys, layer.values
        total = keys.shape[-2]
        n_tree = total - past_len
        if kept_nodes == list(range(n_tree)):
            continue
        idx = torch.tensor(kept_nodes, dtype=torch.long, device=keys.device) + past_len
        layer.keys = torch.cat([keys[..., :past_len, :], keys.index_select(-2, idx)], dim=-2)
        layer.values = torch.cat([values[..., :past_len, :], values.index_select(-2, idx)], dim=-2)
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = layer.keys.shape[-2]
