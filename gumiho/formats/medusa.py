"""Medusa-1 heads read into the engine's ``medusa`` kind (gumiho.drafter).

Medusa (arXiv 2401.10774) puts K heads on the target's last hidden state h_t (after
its final norm). Head k (k = 0..K-1) is L residual blocks, ``x + SiLU(W x + b)``,
then its own LM head, and guesses the token k + 2 places after t: the target's own
LM head gives x_{t+1} (the engine's root token), so head k fills draft position
k + 1. The heads never see the tokens between, which is what makes them cheap and
what limits them.

Two published layouts of the same weights:

    layout        config.json                                    tensors of head k
    fasterdecoding medusa_num_heads, medusa_num_layers,           k.j.linear.{weight,bias} (block j < L),
                  base_model_name_or_path                         k.L.weight (its LM head [V, H]);
                  (FasterDecoding/Medusa; medusa_lm_head.pt or .safetensors)
    vllm          architectures ["MedusaModel"], num_heads,       blocks.k.layers.j.{weight,bias},
                  num_hidden_layers, hidden_size, vocab_size      lm_heads.k.weight

Engine names: ``heads.k.j.linear.{weight,bias}`` and ``lm_heads.k.weight``; the
draft vocabulary is the whole vocabulary. A vLLM checkpoint with a truncated
vocabulary (``truncated_vocab_size`` below ``vocab_size``) is refused: its token map
is not part of the checkpoint.
"""
from __future__ import annotations

import os
import re
from typing import Optional

import torch

from ..drafter import Drafter, DrafterConfig
from ..errors import GumihoError
from ..files.checkpoint import compare_shapes, file_shapes, first_file, meta_shapes, read_checkpoint

WEIGHT_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt", "model.safetensors", "pytorch_model.bin")
_FD_BLOCK = re.compile(r"^(?:medusa_head\.)?(\d+)\.(\d+)\.linear\.(weight|bias)$")
_FD_HEAD = re.compile(r"^(?:medusa_head\.)?(\d+)\.(\d+)\.weight$")
_VLLM_BLOCK = re.compile(r"^blocks\.(\d+)\.layers\.(\d+)\.(weight|bias)$")
_VLLM_HEAD = re.compile(r"^lm_heads\.(\d+)\.weight$")


def layout_of(raw: dict) -> Optional[str]:
    if not isinstance(raw, dict):
        return None
    if "medusa_num_heads" in raw:
        return "fasterdecoding"
    archs = raw.get("architectures") or []
    if isinstance(archs, list) and "MedusaModel" in archs:
        return "vllm"
    return None


def read_config(raw: dict, layout: str, target) -> DrafterConfig:
    """The engine's config for a Medusa checkpoint's config.json, sized from the
    target (FasterDecoding's config names only the head counts)."""
    text_cfg = getattr(target.config, "get_text_config", lambda: target.config)()
    keys = ("medusa_num_heads", "medusa_num_layers") if layout == "fasterdecoding" else ("num_heads",
                                                                                           "num_hidden_layers")
    try:
        heads, layers = (int(raw[k]) for k in keys)
    except (KeyError, TypeError, ValueError):
        raise GumihoError(f"This Medusa config.json lacks a whole-number {' or '.join(keys)}.") from None
    if not 1 <= heads <= 16 or not 0 <= layers <= 8:
        raise GumihoError(f"This Medusa config.json says {heads} heads of {layers} blocks: not a Medusa drafter.")
    hidden = int(raw.get("hidden_size") or text_cfg.hidden_size)
    vocab = int(raw.get("vocab_size") or text_cfg.vocab_size)
    if hidden != text_cfg.hidden_size:
        raise GumihoError(f"These Medusa heads were made for a target of hidden size {hidden}; {target.name} has "
                          f"{text_cfg.hidden_size}. Use the heads made for this target.")
    if vocab != text_cfg.vocab_size:
        raise GumihoError(f"These Medusa heads were made for a vocabulary of {vocab} tokens; {target.name} has "
                          f"{text_cfg.vocab_size}. Use the heads made for this target.")
    truncated = raw.get("truncated_vocab_size")
    if truncated is not None and int(truncated) < vocab:
        raise GumihoError("These Medusa heads use a truncated vocabulary whose token map is not in the checkpoint; "
                          "this engine reads full-vocabulary heads only.")
    return DrafterConfig(hidden_size=hidden, vocab_size=vocab, kind="medusa", serial_positions=0, mlp_heads=heads,
                         num_layers=0, mlp_blocks=layers, num_attention_heads=text_cfg.num_attention_heads,
                         num_key_value_heads=text_cfg.num_attention_heads,
                         target=str(raw.get("base_model_name_or_path") or ""))


def engine_key(key: str, layers: int) -> str:
    """A checkpoint tensor name (either layout) -> the engine's; unknown names pass
    through unchanged (and are then refused as unexpected)."""
    m = _FD_BLOCK.match(key)
    if m and int(m.group(2)) < layers:
        return f"heads.{m.group(1)}.{m.group(2)}.linear.{m.group(3)}"
    m = _FD_HEAD.match(key)
    if m and int(m.group(2)) == layers:
        return f"lm_heads.{m.group(1)}.weight"
    m = _VLLM_BLOCK.match(key)
    if m:
        return f"heads.{m.group(1)}.{m.group(2)}.linear.{m.group(3)}"
    m = _VLLM_HEAD.match(key)
    if m:
        return f"lm_heads.{m.group(1)}.weight"
    return key


def load_medusa(folder: str, target, dtype: Optional[torch.dtype] = None, raw: Optional[dict] = None) -> Drafter:
    """Medusa-1 heads in ``folder`` (either layout) as the engine's medusa drafter,
    attached to ``target``; names and shapes are checked before any weight is read."""
    layout = layout_of(raw or {})
    if layout is None:
        raise GumihoError("This config.json is not a Medusa drafter's (no medusa_num_heads, no MedusaModel).")
    cfg = read_config(raw, layout, target)
    path = first_file(folder, WEIGHT_FILES, "Medusa")
    with torch.device("meta"):
        model = Drafter(cfg)
    expected = {k: v for k, v in meta_shapes(model).items() if k != "draft_vocab_ids"}
    found = {engine_key(k, cfg.mlp_blocks): v for k, v in file_shapes(path).items()}
    compare_shapes(expected, found, f"The Medusa weights {os.path.basename(path)!r}",
                   "Use the checkpoint exactly as its project published it.")
    state = {engine_key(k, cfg.mlp_blocks): v for k, v in read_checkpoint(path).items()}
    if any(not v.is_floating_point() for v in state.values()):
        raise GumihoError("This Medusa checkpoint holds a weight that is not floating point.")
    state["draft_vocab_ids"] = torch.arange(cfg.vocab_size, dtype=torch.long)
    model.load_state_dict(state, strict=True, assign=True)
    return _ready(model, target, dtype)


def _ready(model: Drafter, target, dtype) -> Drafter:
    """An imported drafter on the target's device, frozen, attached to the target."""
    return model.ready_for(target, dtype)
