"""The target's states that drafter training reads, computed from token sequences.

Training needs, at every position of a sequence, the target's final-norm hidden
state h (the regression target and, through the LM head, the soft labels) and, for a
drafter with fused features, the states after its ``feature_layers``. Both come
out of one forward of the target's body, read as decoding reads them
(``gumiho.runtimes.pytorch.forward_with_features``: layer l is the embedding output for l = 0,
the output of decoder layer l, or, for l = N, the final-norm state), so a drafter
trains on exactly the states it is handed when it drafts.

Two ways to get them, same function:

* on the fly (``python -m gumiho.train --features on-the-fly``): the forward runs
  inside every training step on the batch's right-padded token ids. Data is then
  text (token ids and masks, a few bytes per token) and any layer set can be trained
  from the same shards, at the price of a target forward per step;
* cached (``python -m gumiho.train.features``): the same forward once, written to
  shards beside the final states, read back at every epoch.

Right padding changes nothing for real tokens: under the causal mask a token never
attends to what comes after it, and position ids stay 0..n-1.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch


@torch.no_grad()
def target_states(model, ids: torch.Tensor, valid: torch.Tensor,
                  feature_layers: Optional[Sequence[int]] = None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One forward of ``model``'s body over ``ids`` [B, L] (``valid`` [B, L]: 1 on real
    tokens, right padding 0). Returns the final-norm hidden states [B, L, H] float32
    and, with ``feature_layers``, the concatenated states of those layers
    [B, L, k*H] float32 (in the order given), else None. Padding rows are zeros."""
    from ..runtimes.pytorch import forward_with_features

    body = model.base_model
    dev = next(body.parameters()).device
    inputs = dict(input_ids=ids.to(dev), attention_mask=valid.to(dev).long(), use_cache=False)
    keep = valid.to(dev)[..., None].float()
    if not feature_layers:
        return body(**inputs).last_hidden_state.float() * keep, None
    out, features = forward_with_features(body, inputs, tuple(feature_layers))
    return out.last_hidden_state.float() * keep, features.float() * keep
