"""The drafter's KV cache while drafting (the context, then the rows of one draft
tree on top of it) and the causal mask of a block of new positions."""
from __future__ import annotations

import torch


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



def causal_mask(t: int, past: int, device) -> torch.Tensor:
    """[1,1,t,past+t] bool: position i of the new block sees all of the past and
    new positions <= i."""
    m = torch.ones(t, past + t, dtype=torch.bool, device=device)
    m[:, past:] = torch.tril(m[:, past:])
    return m[None, None]

