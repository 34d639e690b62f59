"""The torch runtime's view of a draft tree: the verify forward's inputs.

The tree (gumiho.tree) is flattened into T = len(tree) tokens after a KV cache of P:
node i sits at position P + depth(i), and its row of the additive attention mask is 0
over every cached position and over node j iff j is i or an ancestor of i (a large
negative value elsewhere), so each node's logits are those of its own path, all paths
in one forward. (The llama.cpp runtime builds the same mask from sequence ids:
gumiho.runtimes.llamacpp.)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only
    from ..tree import DraftTree


def _ancestor_lists(parents: list[int]) -> list[list[int]]:
    """For each node, itself and its ancestors (root first). Parents come first, so
    a node's list is its parent's plus itself."""
    anc: list[list[int]] = []
    for i, p in enumerate(parents):
        anc.append(anc[p] + [i] if p >= 0 else [i])
    return anc


def ancestor_matrix(tree: DraftTree, device=None) -> torch.Tensor:
    """[T, T] bool: entry (i, j) is True iff j is i or an ancestor of i."""
    t = len(tree)
    flat = [i * t + j for i, a in enumerate(_ancestor_lists(tree.parents)) for j in a]
    m = torch.zeros(t * t, dtype=torch.bool)
    m[torch.tensor(flat, dtype=torch.long)] = True
    m = m.view(t, t)
    return m.to(device) if device is not None else m


def verify_inputs(tree: DraftTree, past_len: int, device, dtype):
    """Input ids [1,T], position ids [1,T] and the additive 4D attention mask
    [1,1,T,P+T] (0 where attention is allowed, a large negative value elsewhere) for
    one target forward over the whole tree after a cache of ``past_len`` tokens."""
    return tree_inputs(tree.tokens, tree.parents, tree.depths, past_len, device, dtype)


def tree_inputs(tokens: list[int], parents: list[int], depths: list[int], past_len: int, device, dtype):
    """:func:`verify_inputs` from the tree's lists (what a runtime is handed)."""
    t = len(tokens)
    width = past_len + t
    ids = torch.tensor([tokens], dtype=torch.long, device=device)
    pos = torch.tensor([[past_len + d for d in depths]], dtype=torch.long, device=device)
    # Every cached position is visible; of the tree, a node's ancestors and itself.
    flat = [i * width + past_len + j for i, a in enumerate(_ancestor_lists(parents)) for j in a]
    mask = torch.full((t, width), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :past_len] = 0
    mask.view(-1)[torch.tensor(flat, dtype=torch.long, device=device)] = 0
    return ids, pos, mask[None, None]
