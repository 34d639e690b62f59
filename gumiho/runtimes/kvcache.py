"""Keeping only the accepted path in the target's KV cache.

After a verify forward the cache holds P entries of context followed by T entries
for the tree nodes, in tree order. Only the root and the accepted nodes belong to
the sequence; the rest are dropped and the kept ones moved into place, so the
cache equals the one a token-by-token decoder would have built.

``new_cache()`` is the cache the decode loop uses: a transformers DynamicCache
whose layers keep their keys/values in buffers with room to spare, so a forward
appends in place instead of copying the whole cache into a new tensor (which, for
a few hundred tokens of context, took a fifth of a one-token forward on a CPU).
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


def _writable(t: torch.Tensor) -> bool:
    """Whether ``t`` may be written in place here (a tensor made in inference mode
    may only be written in inference mode)."""
    return not t.is_inference() or torch.is_inference_mode_enabled()


class GrowingLayer(DynamicLayer):
    """A DynamicLayer whose ``keys``/``values`` are views of the first entries of
    larger buffers: appending writes into the buffers (doubling them when full).
    Anything that replaces ``keys``/``values`` with other tensors (cropping to a
    view is fine) simply makes the next append start new buffers from them."""

    _buf_k = None
    _buf_v = None

    def _in_buffers(self) -> bool:
        k, b = self.keys, self._buf_k
        return (b is not None and k.dim() == 4 and k.data_ptr() == b.data_ptr() and k.stride() == b.stride()
                and self.values.data_ptr() == self._buf_v.data_ptr() and self.values.stride() == self._buf_v.stride())

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        t = key_states.shape[-2]
        if not (self._in_buffers() and n + t <= self._buf_k.shape[-2] and _writable(self._buf_k)
                and self._buf_k.shape[:-2] == key_states.shape[:-2] and self._buf_k.dtype == key_states.dtype
                and self._buf_v.shape[:-2] == value_states.shape[:-2]):
            cap = max(256, 2 * (n + t))
            buf_k = key_states.new_empty(*key_states.shape[:-2], cap, key_states.shape[-1])
            buf_v = value_states.new_empty(*value_states.shape[:-2], cap, value_states.shape[-1])
            if n:
                buf_k[..., :n, :] = self.keys
                buf_v[..., :n, :] = self.values
            self._buf_k, self._buf_v = buf_k, buf_v
        self._buf_k[..., n:n + t, :] = key_states
        self._buf_v[..., n:n + t, :] = value_states
        self.keys = self._buf_k[..., :n + t, :]
        self.values = self._buf_v[..., :n + t, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._buf_k = self._buf_v = None
        super().reset()


def new_cache() -> DynamicCache:
    """An empty DynamicCache whose layers are GrowingLayers."""
    cache = DynamicCache()
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer and not cache.layers:
        cache.layer_class_to_replicate = GrowingLayer
    return cache


def cache_layers(cache):
    """The per-layer objects holding `keys`/`values` [B, heads, S, D]."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"Unsupported cache type {type(cache).__name__}: expected a transformers DynamicCache.")
    return layers




def truncate_entries(cache, length: int) -> None:
    """Cut the cache to a view of its first ``length`` entries. Nothing is copied or
    freed: a GrowingLayer's next append writes after them in its buffers."""
    for layer in cache_layers(cache):
        if layer.keys is None or layer.keys.dim() != 4:
            continue  # a layer not yet written holds nothing to cut
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = min(layer.cumulative_length, length)


def keep_tree_entries(cache, past_len: int, kept_nodes: list[int]):
    """Keep cache[:past_len] and the entries of tree nodes ``kept_nodes`` (indices
    into the tree, root = 0), in that order; drop every other tree entry.

    Kept entries are moved down in place and the cache becomes a view of its first
    past_len + len(kept_nodes) entries: nothing of the context is copied."""
    n_keep = len(kept_nodes)
    # Entries already in place: kept_nodes starts 0, 1, 2, ... (the root always is).
    first = 0
    while first < n_keep and kept_nodes[first] == first:
        first += 1
    idx = None
    for layer in cache_layers(cache):
        keys, values = layer.keys, layer.values
        end = past_len + n_keep
        if keys.shape[-2] == end and first == n_keep:
            continue  # every tree entry kept, in order
        if first < n_keep:
            if idx is None:
                idx = torch.tensor(kept_nodes[first:], dtype=torch.long, device=keys.device) + past_len
            if not (_writable(keys) and _writable(values)):
                keys, values = keys.clone(), values.clone()
            keys[..., past_len + first:end, :] = keys.index_select(-2, idx)
            values[..., past_len + first:end, :] = values.index_select(-2, idx)
        layer.keys = keys[..., :end, :]
        layer.values = values[..., :end, :]
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length = end
