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

The kinds (gumiho.drafter.kinds, one strategy each) give the two ablations of the
paper by layout: ``kind="serial"`` (S = 7, M = 0, EAGLE-like) and
``kind="parallel"`` (S = 0, M = 7, Medusa-like: every position from the target's
own hidden state).

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


The package, one idea per module (data flows down the list):

    kv       the KV cache while drafting, the causal mask
    layers   norm, rotary embeddings, attention, decoder layers, SiLU blocks
    kinds    each kind as a strategy: layout, modules, how it reads and drafts
    config   DrafterConfig (sizes, layout, features), validated
    model    Drafter: the weights, the forward's pieces, its folder
"""
from .config import ROPE_SCALINGS, DrafterConfig, default_feature_layers
from .kinds import DRAFTER_KINDS, IMPORTED_KINDS, KINDS, OWN_HEAD_KINDS, Kind, kind_layout
from .kv import GrowingKV, causal_mask
from .layers import apply_rope, rope_cos_sin, rope_inv_freq
from .model import Drafter

__all__ = ["DRAFTER_KINDS", "IMPORTED_KINDS", "KINDS", "OWN_HEAD_KINDS", "ROPE_SCALINGS", "Drafter", "DrafterConfig",
           "GrowingKV", "Kind", "apply_rope", "causal_mask", "default_feature_layers", "kind_layout", "rope_cos_sin",
           "rope_inv_freq"]
