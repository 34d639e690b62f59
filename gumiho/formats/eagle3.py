"""EAGLE-3 drafters in the layouts other projects publish, read into the engine's
``eagle3`` kind (gumiho.drafter) and written back out for the engines that serve them.

One network, two published layouts (as vLLM's ``llama_eagle3`` loader and its
``speculators`` config adapter read them):

    layout        config.json                                       first layer
    eagle         architectures LlamaForCausalLMEagle3 (or          midlayer.*
                  Eagle3LlamaForCausalLM); the Llama keys at the
                  top level; draft_vocab_size, target_hidden_size,
                  eagle_config.eagle_aux_hidden_state_layer_ids;
                  norm_before_residual (default false)
                  (the EAGLE repository's checkpoints, SpecForge's)
    speculators   speculators_model_type "eagle3"; the Llama keys   layers.0.*
                  under transformer_layer_config; draft_vocab_size,
                  target_hidden_size, norm_before_residual (default
                  true), eagle_aux_hidden_state_layer_ids,
                  speculators_config.verifier.name_or_path

Tensors, checkpoint -> engine (H the drafter's width, Ht the target's, V the
target's vocabulary, V' the draft vocabulary):

    fc.weight [H, 3 Ht]                       fuse.weight (the fused low/middle/high layers)
    midlayer.X or layers.0.X                  layers.0.X: input_layernorm, hidden_norm,
                                              self_attn.{q,k,v}_proj [., 2H], self_attn.o_proj,
                                              post_attention_layernorm, mlp.{gate,up,down}_proj
    layers.N.X (N >= 1)                       layers.N.X (ordinary Llama layers)
    norm.weight [H]                           norm.weight
    lm_head.weight [V', H]                    lm_head.weight
    d2t [V'] int64                            draft_vocab_ids = arange(V') + d2t (target id of
                                              draft id i is i + d2t[i])
    t2d [V] bool                              checked: true exactly at the draft ids
    embed_tokens.weight [V, H]                not kept: the target's embedding is used (its
                                              shape is checked)

The auxiliary layer ids count as EAGLE-3 counts them: id l is the input of the
target's decoder layer l, i.e. the output of layer l - 1, which is transformers'
``hidden_states[l]`` and the engine's ``feature_layers`` numbering, so the ids carry
over unchanged (default 2, N // 2, N - 3 of an N-layer target).

Nothing from a checkpoint runs code: safetensors, or a torch pickle read with
``weights_only``; names, shapes and the vocabulary map are checked before the
network is built.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import torch

from ..drafter import Drafter, DrafterConfig, default_feature_layers
from ..errors import GumihoError
from ..files.checkpoint import compare_shapes, file_shapes, first_file, meta_shapes, read_checkpoint

EAGLE_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
LAYOUTS = ("eagle", "speculators")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Tensors a checkpoint may carry that the engine does not keep.
SKIPPED = ("embed_tokens.weight", "t2d", "d2t")
# Config keys that would change the network in ways the engine's eagle3 kind does not model.
UNSUPPORTED_FLAGS = ("attention_bias", "mlp_bias", "qkv_bias", "bias")


def layout_of(raw: dict) -> Optional[str]:
    """'eagle' or 'speculators' for an EAGLE-3 config.json, else None."""
    if not isinstance(raw, dict):
        return None
    if raw.get("speculators_model_type") == "eagle3":
        return "speculators"
    archs = raw.get("architectures") or []
    if isinstance(archs, list) and any(a in EAGLE_ARCHITECTURES for a in archs):
        return "eagle"
    return None


def _llama_keys(raw: dict, layout: str) -> dict:
    if layout == "speculators":
        inner = raw.get("transformer_layer_config")
        if not isinstance(inner, dict):
            raise GumihoError("This speculators EAGLE-3 config has no transformer_layer_config (the draft layer's "
                              "Llama settings); it is incomplete.")
        return inner
    return raw


def _aux_layers(raw: dict, layout: str, target_layers: int) -> Optional[tuple]:
    """The target layers the drafter fuses: the config's ids, EAGLE-3's default low,
    middle and high layers when it names none, or None when it fuses none."""
    eagle_cfg = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if eagle_cfg.get("use_aux_hidden_state") is False:
        return None
    ids = raw.get("eagle_aux_hidden_state_layer_ids") or eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        return default_feature_layers(target_layers)
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise GumihoError(f"eagle_aux_hidden_state_layer_ids must be a list of layer numbers, got {ids!r}.")
    return tuple(ids)


def read_config(raw: dict, layout: str, target) -> DrafterConfig:
    """The engine's config for an EAGLE-3 checkpoint's config.json, checked against
    ``target`` (a loaded gumiho Target): width and vocabulary must be the target's."""
    llama = _llama_keys(raw, layout)
    text_cfg = getattr(target.config, "get_text_config", lambda: target.config)()
    flags = [k for k in UNSUPPORTED_FLAGS if llama.get(k)]
    if flags:
        raise GumihoError(f"This EAGLE-3 checkpoint sets {', '.join(flags)}: a variant with biases, which the engine's "
                          f"eagle3 drafter does not have.")
    try:
        hidden, vocab = int(llama["hidden_size"]), int(llama["vocab_size"])
        heads = int(llama["num_attention_heads"])
        cfg_fields = dict(
            hidden_size=hidden, vocab_size=vocab, kind="eagle3", serial_positions=7, mlp_heads=0,
            num_layers=int(llama.get("num_hidden_layers", 1)), num_attention_heads=heads,
            num_key_value_heads=int(llama.get("num_key_value_heads") or heads),
            head_dim=int(llama.get("head_dim") or hidden // heads),
            intermediate_size=int(llama["intermediate_size"]),
            rms_norm_eps=float(llama.get("rms_norm_eps", 1e-6)),
            rope_theta=float(_rope_theta(llama)), rope_scaling=_rope_scaling(llama),
            draft_vocab_size=int(raw.get("draft_vocab_size") or llama.get("draft_vocab_size") or vocab),
            norm_before_residual=bool(raw.get("norm_before_residual", layout == "speculators")),
            target=str(_verifier(raw) or ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise GumihoError(f"This EAGLE-3 config.json lacks or mistypes a setting the draft layer needs ({e!s:.80}).") \
            from None
    target_hidden = int(raw.get("target_hidden_size") or llama.get("target_hidden_size") or hidden)
    if target_hidden != text_cfg.hidden_size or hidden != text_cfg.hidden_size:
        raise GumihoError(f"This EAGLE-3 drafter was made for a target of hidden size {target_hidden} (its own width "
                          f"{hidden}); {target.name} has {text_cfg.hidden_size}. Use the drafter made for this target.")
    if vocab != text_cfg.vocab_size:
        raise GumihoError(f"This EAGLE-3 drafter was made for a vocabulary of {vocab} tokens; {target.name} has "
                          f"{text_cfg.vocab_size}. Use the drafter made for this target.")
    if cfg_fields["num_layers"] < 1:
        raise GumihoError("An EAGLE-3 drafter has at least one layer; this config says num_hidden_layers 0.")
    cfg_fields["feature_layers"] = _aux_layers(raw, layout, text_cfg.num_hidden_layers)
    return DrafterConfig(**cfg_fields)


def _rope_theta(llama: dict):
    params = llama.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return llama.get("rope_theta", 10000.0)


def _rope_scaling(llama: dict) -> Optional[dict]:
    scaling = llama.get("rope_scaling") or llama.get("rope_parameters")
    if not isinstance(scaling, dict):
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return None if kind == "default" else {k: v for k, v in scaling.items() if k != "rope_theta"}


def _verifier(raw: dict) -> Optional[str]:
    spec = raw.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("verifier"), dict):
        return spec["verifier"].get("name_or_path")
    return raw.get("base_model_name_or_path") or raw.get("target_model")


# ----------------------------------------------------------------------------- tensors


def engine_key(key: str) -> str:
    """A checkpoint's tensor name -> the engine's (module docstring's table)."""
    if key.startswith("model."):  # some exports keep the "model." prefix of a causal-LM wrapper
        key = key[len("model."):]
    if key == "fc.weight":
        return "fuse.weight"
    if key.startswith("midlayer."):
        return "layers.0." + key[len("midlayer."):]
    return key


def checkpoint_key(key: str, layout: str) -> str:
    """The engine's tensor name -> the name ``layout`` stores it under."""
    if key == "fuse.weight":
        return "fc.weight"
    if layout == "eagle" and key.startswith("layers.0."):
        return "midlayer." + key[len("layers.0."):]
    return key


def draft_ids_from_map(d2t: Optional[torch.Tensor], t2d: Optional[torch.Tensor], n_draft: int,
                       vocab: int) -> torch.Tensor:
    """The target id of every draft id, from the offsets ``d2t`` (target = draft +
    d2t[draft]), checked: in the vocabulary, no two draft ids on one target id, and
    ``t2d`` (where given) true exactly there. No d2t: the draft vocabulary is the
    whole vocabulary, in order."""
    if d2t is None:
        if n_draft != vocab:
            raise GumihoError(f"This EAGLE-3 drafter's draft vocabulary has {n_draft} tokens but no d2t map says "
                              f"which target tokens they are.")
        return torch.arange(vocab, dtype=torch.long)
    if d2t.dim() != 1 or d2t.numel() != n_draft or d2t.is_floating_point():
        raise GumihoError(f"The d2t map must hold {n_draft} whole numbers (one per draft token), got shape "
                          f"{list(d2t.shape)} of {d2t.dtype}.")
    ids = torch.arange(n_draft, dtype=torch.long) + d2t.long()
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise GumihoError(f"The d2t map sends draft tokens outside the target's vocabulary of {vocab} (to "
                          f"{int(ids.min())}..{int(ids.max())}): a wrong or shifted draft-vocabulary map.")
    if ids.unique().numel() != n_draft:
        raise GumihoError("The d2t map sends two draft tokens to the same target token: a wrong draft-vocabulary map.")
    if t2d is not None:
        mask = torch.zeros(vocab, dtype=torch.bool)
        mask[ids] = True
        if t2d.shape != (vocab,) or not torch.equal(t2d.bool(), mask):
            raise GumihoError("The t2d mask does not mark exactly the target tokens that d2t maps the draft tokens to: "
                              "the two halves of the draft-vocabulary map disagree.")
    return ids


def load_eagle3(folder: str, target, dtype: Optional[torch.dtype] = None, raw: Optional[dict] = None) -> Drafter:
    """An EAGLE-3 drafter folder (either layout) as the engine's eagle3 drafter,
    attached to ``target``. Everything is checked before any weight is read."""
    if raw is None:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
    layout = layout_of(raw)
    if layout is None:
        raise GumihoError("This config.json is not an EAGLE-3 drafter's (no LlamaForCausalLMEagle3 architecture, no "
                          "speculators_model_type eagle3).")
    cfg = read_config(raw, layout, target)
    path = first_file(folder, WEIGHT_FILES, "EAGLE-3 drafter")
    with torch.device("meta"):
        model = Drafter(cfg)
    expected = {k: v for k, v in meta_shapes(model).items() if k != "draft_vocab_ids"}
    shapes = {engine_key(k): v for k, v in file_shapes(path).items()}
    found = {k: v for k, v in shapes.items() if k not in SKIPPED}
    embed = shapes.get("embed_tokens.weight")
    vocab, hidden = cfg.vocab_size, cfg.hidden_size
    if embed is not None and tuple(embed) != (vocab, hidden):
        raise GumihoError(f"This EAGLE-3 drafter's embed_tokens is {list(embed)}, the target's embedding "
                          f"[{vocab}, {hidden}]: it was made for another model.")
    compare_shapes(expected, found, f"The EAGLE-3 drafter weights {os.path.basename(path)!r}",
                   "Use the checkpoint exactly as its project published it.")
    state = {engine_key(k): v for k, v in read_checkpoint(path).items()}
    ids = draft_ids_from_map(state.get("d2t"), state.get("t2d"), cfg.draft_vocab_size, vocab)
    weights = {k: v for k, v in state.items() if k not in SKIPPED}
    if any(not v.is_floating_point() for v in weights.values()):
        raise GumihoError("This EAGLE-3 checkpoint holds a weight that is not floating point.")
    weights["draft_vocab_ids"] = ids
    model.load_state_dict(weights, strict=True, assign=True)
    return model.ready_for(target, dtype)


# ----------------------------------------------------------------------------- writing


def export_config(drafter: Drafter, layout: str, target_config, num_speculative_tokens: int = 3) -> dict:
    """config.json of ``drafter`` in ``layout``, with the keys vLLM's loader (and
    SGLang's LlamaForCausalLMEagle3) read."""
    cfg = drafter.cfg
    text_cfg = getattr(target_config, "get_text_config", lambda: target_config)()
    llama = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "num_hidden_layers": cfg.num_layers, "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta, "hidden_act": "silu", "vocab_size": cfg.vocab_size,
        "max_position_embeddings": int(getattr(text_cfg, "max_position_embeddings", 8192)),
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": getattr(text_cfg, "bos_token_id", None), "eos_token_id": getattr(text_cfg, "eos_token_id", None),
        "torch_dtype": str(drafter.weight_dtype).replace("torch.", ""),
    }
    if cfg.rope_scaling:
        llama["rope_scaling"] = dict(cfg.rope_scaling)
    fused = {"use_aux_hidden_state": bool(cfg.feature_layers)}
    if cfg.feature_layers:
        fused["eagle_aux_hidden_state_layer_ids"] = list(cfg.feature_layers)
    draft = {"draft_vocab_size": int(drafter.draft_vocab_ids.numel()), "target_hidden_size": cfg.hidden_size,
             "norm_before_residual": cfg.norm_before_residual}
    if layout == "eagle":
        return {**llama, **draft, "eagle_config": fused, "base_model_name_or_path": cfg.target or None}
    if layout != "speculators":
        raise GumihoError(f"Unknown EAGLE-3 layout {layout!r}; use one of {', '.join(LAYOUTS)}.")
    llama = {k: v for k, v in llama.items() if k not in ("architectures", "torch_dtype")}
    llama["architectures"] = ["LlamaForCausalLM"]
    out = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", **draft,
           "transformer_layer_config": llama, "torch_dtype": str(drafter.weight_dtype).replace("torch.", ""),
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy",
                                                        "speculative_tokens": num_speculative_tokens}],
                                  "verifier": {"name_or_path": cfg.target or None,
                                               "architectures": list(getattr(text_cfg, "architectures", None)
                                                                     or ["LlamaForCausalLM"])}}}
    if cfg.feature_layers:
        out["eagle_aux_hidden_state_layer_ids"] = list(cfg.feature_layers)
    return out


def export_state(drafter: Drafter, layout: str) -> dict:
    """The tensors of ``drafter`` under ``layout``'s names, with the draft-vocabulary
    map (d2t offsets, t2d mask)."""
    ids = drafter.draft_vocab_ids.detach().cpu().long()
    state = {checkpoint_key(k, layout): v.detach().cpu().contiguous()
             for k, v in drafter.state_dict().items() if k != "draft_vocab_ids"}
    state["d2t"] = ids - torch.arange(ids.numel(), dtype=torch.long)
    t2d = torch.zeros(drafter.cfg.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    state["t2d"] = t2d
    return state


def write_eagle3(drafter: Drafter, out: str, target_config, layout: str = "eagle",
                 num_speculative_tokens: int = 3) -> list[str]:
    """Write an eagle3 drafter as an EAGLE-3 checkpoint folder (config.json +
    model.safetensors) in ``layout``. Returns the files written."""
    from ..files.tensors import save_tensors

    if drafter.cfg.kind != "eagle3":
        raise GumihoError(f"Only an eagle3 drafter can be written as an EAGLE-3 checkpoint; this one is "
                          f"{drafter.cfg.kind!r} (train one with `python -m gumiho.train --kind eagle3`).")
    config = export_config(drafter, layout, target_config, num_speculative_tokens)
    os.makedirs(out, exist_ok=True)
    weights = os.path.join(out, "model.safetensors")
    save_tensors(export_state(drafter, layout), weights, metadata={"format": "pt"})
    config_path = os.path.join(out, "config.json")
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    return [config_path, weights]
