"""The drafter model: its weights (as its kind builds them, gumiho.drafter.kinds),
the target's frozen embedding and LM head it borrows, the pieces of its forward
that the proposer (gumiho.proposers.learned) and training run, and its folder
(config.json and model.safetensors). Notation: gumiho.drafter."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, fields
from typing import Optional

import torch
import torch.nn as nn

from ..errors import GumihoError
from ..files.checkpoint import compare_shapes, meta_shapes, safetensors_shapes, unreadable
from ..kernels.cpulinear import PackedWeight
from ..kernels.int4linear import available as int4_available
from ..kernels.int4linear import current as int4_current
from ..kernels.int4linear import int4_linears, product
from .config import DrafterConfig
from .layers import rope_cos_sin


class Drafter(nn.Module):
    """Hybrid serial/parallel drafter. See the module docstring for the notation."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        n_draft = cfg.draft_vocab_size or cfg.vocab_size
        kind = cfg.kind_spec
        # fc(cat(embedding, state)); eagle3 has none (its first layer reads both), nor Medusa.
        self.fc = kind.input_layer(cfg)
        # Fused target features -> one H-wide state (only with feature_layers).
        self.fuse = nn.Linear(cfg.feature_width, h, bias=False) if cfg.feature_layers else None
        self.layers = nn.ModuleList([kind.layer(cfg, i) for i in range(cfg.num_layers)])
        self.heads = nn.ModuleList([kind.mlp_head(cfg) for _ in range(cfg.mlp_heads)])
        # eagle3's own final norm and LM head over the draft vocabulary; Medusa-1's
        # LM head per head, over the whole vocabulary.
        self.norm, self.lm_head, self.lm_heads = kind.output_heads(cfg, n_draft)
        # Restricted draft vocabulary: ids of the tokens the drafter may propose.
        self.register_buffer("draft_vocab_ids", torch.arange(n_draft, dtype=torch.long), persistent=True)
        # The target's frozen pieces, attached later and never saved with the drafter.
        self._embed: Optional[nn.Embedding] = None
        self._lm_head_weight: Optional[torch.Tensor] = None
        self._draft_head_weight: Optional[torch.Tensor] = None
        self._draft_head_packed: Optional[PackedWeight] = None  # its packed copy, kept beside it
        # With use_int4: the draft head's 4-bit copy (gumiho.kernels.int4linear), remade with it.
        self.int4 = False
        self._draft_head_int4 = None

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
            self._draft_head_packed = PackedWeight(self._draft_head_weight)
            if self.int4:
                self._draft_head_int4 = int4_current(self._draft_head_weight, None)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._refresh_draft_head()
        return out

    @property
    def weight_dtype(self) -> torch.dtype:
        """The dtype the drafter computes in (its first parameter's)."""
        return next(self.parameters()).dtype

    @property
    def precision(self) -> str:
        """In words, for records: "float32", "bfloat16", "bfloat16, 4-bit products"."""
        name = str(self.weight_dtype).replace("torch.", "")
        return f"{name}, 4-bit products" if self.int4 else name

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

    def use_int4(self) -> "Drafter":
        """Draft through 4-bit copies of every linear weight and of the draft head
        (gumiho.kernels.int4linear): a cheaper step beside a 4-bit target. The weights
        themselves stay, for saving and training. A no-op where the CPU does not take
        the 4-bit kernel (see gumiho.kernels.int4linear.available)."""
        if int4_available() and self.weight_device.type == "cpu":
            int4_linears(self)
            self.int4 = True
            self._refresh_draft_head()
        return self

    def draft_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary through the target's LM head rows (its
        4-bit copy when drafting with use_int4)."""
        hidden = hidden.to(self._draft_head_weight.dtype)
        head = self._draft_head_int4
        if head is not None and not torch.is_grad_enabled() and hidden.device.type == "cpu":
            return product(hidden, head)
        return self._draft_head_packed(hidden)

    def init_own_head(self, target_model) -> None:
        """A drafter's own final norm and LM head (eagle3) started from the target's;
        nothing for a kind that reads the target's."""
        self.cfg.kind_spec.start_own_head(self, target_model)

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
        return self.cfg.kind_spec.draft_logits(self, hidden)

    def head_logits(self, head_out: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of the MLP heads' outputs [.., n heads, H] ->
        [.., n heads, V']: through the draft head, or each Medusa head's own."""
        return self.cfg.kind_spec.head_logits(self, head_out)

    def train_logits(self, pred: torch.Tensor) -> torch.Tensor:
        """Float32 draft-vocabulary logits of predicted states, with autograd (training)."""
        return self.cfg.kind_spec.train_logits(self, pred)

    def set_draft_vocab(self, ids: torch.Tensor):
        kind = self.cfg.kind_spec
        ids = kind.draft_vocab_order(torch.as_tensor(ids, dtype=torch.long).flatten())
        self.cfg.draft_vocab_size = int(ids.numel())
        self.draft_vocab_ids = ids.to(self.weight_device)
        kind.resize_own_head(self, int(ids.numel()))
        self._refresh_draft_head()

    # -- pieces of the forward -------------------------------------------------------

    def project(self, hidden: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """fc(cat(embed(x_{i+1}), h_i)): the drafter's input for one position (eagle3:
        the concatenation itself, 2H wide, which its first layer reads)."""
        return self.cfg.kind_spec.read(self, hidden, next_ids)

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
        from ..files.tensors import save_tensors

        os.makedirs(folder, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if dtype is not None:
            state = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state.items()}
        tmp = os.path.join(folder, "model.safetensors.tmp")
        save_tensors(state, tmp, metadata={"format": "pt"})
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
                f"(for an official Gumiho checkpoint with pytorch_model.bin, use gumiho.formats.official)."
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

