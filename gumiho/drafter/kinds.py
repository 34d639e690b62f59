"""The kinds of drafter, one small strategy each: its default layout (how many
serial positions, MLP heads and Transformer layers), the modules it is built of,
what its first layer reads and how its states become draft logits. The model
(gumiho.drafter.model) holds the weights and asks its kind; nothing else branches
on the kind's name.

    gumiho     2 serial positions, then 5 MLP heads (the paper's hybrid)
    serial     7 serial positions (the paper's all-serial ablation, EAGLE-like)
    parallel   7 MLP heads on the target's state (the all-parallel ablation, Medusa-like)
    eagle      EAGLE-2, the baseline the paper compares with: one layer, all serial
    eagle3     EAGLE-3: one layer reading [embedding; fused state] 2H wide, its own
               final norm and LM head over the draft vocabulary (see gumiho.drafter)
    medusa     Medusa-1 heads read from other projects' checkpoints (gumiho.formats):
               residual blocks on the target's state, each head its own LM head
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..errors import GumihoError
from ..kernels.cpulinear import full_precision_product
from .layers import DecoderLayer, Eagle3FirstLayer, RMSNorm, SiLUBlock


class Kind:
    """The hybrid drafter (gumiho, serial, parallel, eagle differ only in layout):
    ``fc(cat(embed(x_{i+1}), h_i))`` feeds the serial layers, MLP heads read the last
    two serial inputs, and every state is read through the target's LM head rows.

    ``cfg`` is the drafter's DrafterConfig (gumiho.drafter.config) and ``drafter`` the
    Drafter (gumiho.drafter.model). The config imports this module (it looks its kind
    up in KINDS) and the model imports the config, so both are named here in words,
    not imported, not even for annotations: the drafter's modules import one another
    in one direction."""

    trained = True  # trained by gumiho.train; False: read from other projects' checkpoints only
    own_head = False  # a final norm and LM head of its own, over the draft vocabulary
    fused_by_default = False  # reads the target's low, middle and high layers unless told otherwise

    def __init__(self, name: str, **layout):
        self.name = name
        self.layout = layout

    # -- what it is built of (in this order: the order fixes a random start's draws)

    def input_layer(self, cfg) -> Optional[nn.Module]:
        """fc over [embedding; state], 2H -> H."""
        return nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=True)

    def layer(self, cfg, index: int) -> nn.Module:
        return DecoderLayer(cfg, index)

    def mlp_head(self, cfg) -> nn.Sequential:
        h = cfg.hidden_size
        blocks = [SiLUBlock(h * cfg.head_inputs, h, residual=False)]
        blocks += [SiLUBlock(h, h, residual=True) for _ in range(cfg.mlp_blocks)]
        return nn.Sequential(*blocks)

    def output_heads(self, cfg, n_draft: int):
        """(final norm, LM head, per-head LM heads) of its own; None where it reads the target's."""
        return None, None, None

    # -- how it drafts

    def read(self, drafter, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """The input of one position: fc(cat(embed(x_{i+1}), h_i))."""
        joined = torch.cat([drafter.embed(next_ids), hidden.to(drafter.weight_dtype)], dim=-1)
        return drafter.fc(joined)

    def draft_logits(self, drafter, hidden: torch.Tensor) -> torch.Tensor:
        return drafter.draft_head(hidden)

    def head_logits(self, drafter, head_out: torch.Tensor) -> torch.Tensor:
        return drafter.draft_logits(head_out)

    def train_logits(self, drafter, pred: torch.Tensor) -> torch.Tensor:
        return pred.float() @ drafter._draft_head_weight.float().T

    # -- its draft vocabulary and own head

    def draft_vocab_order(self, ids: torch.Tensor) -> torch.Tensor:
        return ids

    def resize_own_head(self, drafter, n: int) -> None:
        pass

    def start_own_head(self, drafter, target_model) -> None:
        pass


class Eagle3(Kind):
    """EAGLE-3: no fc (its first layer reads [embedding; state] itself), the target's
    fused layers, its own final norm and LM head."""

    own_head = True
    fused_by_default = True

    def input_layer(self, cfg):
        return None

    def layer(self, cfg, index):
        return Eagle3FirstLayer(cfg) if index == 0 else DecoderLayer(cfg, index)

    def output_heads(self, cfg, n_draft):
        return RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), nn.Linear(cfg.hidden_size, n_draft, bias=False), None

    def read(self, drafter, hidden, next_ids):
        return torch.cat([drafter.embed(next_ids), hidden.to(drafter.weight_dtype)], dim=-1)

    def draft_logits(self, drafter, hidden):
        return full_precision_product(drafter.lm_head, drafter.norm(hidden.to(drafter.weight_dtype)))

    def train_logits(self, drafter, pred):
        return drafter.lm_head(drafter.norm(pred.to(drafter.weight_dtype))).float()

    def draft_vocab_order(self, ids):
        # In id order, as EAGLE-3's offset map (d2t) is usually built: export is then a renaming.
        return ids.sort().values

    def resize_own_head(self, drafter, n):
        if drafter.lm_head.weight.shape[0] != n:
            # A new draft vocabulary is a new LM head (started from the target's rows, when attached).
            drafter.lm_head = nn.Linear(drafter.cfg.hidden_size, n, bias=False).to(
                device=drafter.weight_device, dtype=drafter.weight_dtype)

    def start_own_head(self, drafter, target_model):
        """Its final norm and LM head started from the target's: the final norm's
        weight, and the rows of the LM head for the draft vocabulary (a drafter whose
        output matched the target's last residual state would then give the
        target's logits)."""
        drafter._require_target()
        with torch.no_grad():
            drafter.lm_head.weight.copy_(
                drafter._lm_head_weight[drafter.draft_vocab_ids.to(drafter._lm_head_weight.device)])
            final_norm = getattr(getattr(target_model, "model", None), "norm", None)
            if final_norm is not None and getattr(final_norm, "weight", None) is not None:
                drafter.norm.weight.copy_(final_norm.weight.detach())


class Medusa(Kind):
    """Medusa-1 heads: residual blocks on the target's state alone, each head its own
    LM head over the whole vocabulary."""

    trained = False

    def input_layer(self, cfg):
        return None

    def mlp_head(self, cfg):
        return nn.Sequential(*[SiLUBlock(cfg.hidden_size, cfg.hidden_size, residual=True)
                               for _ in range(cfg.mlp_blocks)])

    def output_heads(self, cfg, n_draft):
        return None, None, nn.ModuleList([nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
                                          for _ in range(cfg.mlp_heads)])

    def read(self, drafter, hidden, next_ids):
        return hidden.to(drafter.weight_dtype)

    def head_logits(self, drafter, head_out):
        return torch.stack([full_precision_product(lm, head_out[..., j, :].to(drafter.weight_dtype))
                            for j, lm in enumerate(drafter.lm_heads[:head_out.shape[-2]])], dim=-2)


KINDS = {k.name: k for k in (
    Kind("gumiho", serial_positions=2, mlp_heads=5),
    Kind("serial", serial_positions=7, mlp_heads=0),
    Kind("parallel", serial_positions=0, mlp_heads=7, num_layers=0),
    Kind("eagle", serial_positions=7, mlp_heads=0, num_layers=1),
    Eagle3("eagle3", serial_positions=7, mlp_heads=0, num_layers=1),
    Medusa("medusa"),
)}
DRAFTER_KINDS = tuple(name for name, k in KINDS.items() if k.trained)
# Kinds with a final norm and an LM head of their own (over the draft vocabulary).
OWN_HEAD_KINDS = tuple(name for name, k in KINDS.items() if k.own_head)
# Kinds read from other projects' checkpoints only (gumiho.formats), never trained here.
IMPORTED_KINDS = tuple(name for name, k in KINDS.items() if not k.trained)


def kind_layout(kind: str) -> dict:
    """A trained kind's default serial positions, MLP heads (and layers, where fixed)."""
    if kind not in DRAFTER_KINDS:
        raise GumihoError(f"Unknown drafter kind {kind!r}; use one of {DRAFTER_KINDS}.")
    return dict(KINDS[kind].layout)
