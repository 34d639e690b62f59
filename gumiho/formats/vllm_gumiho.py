"""The layout the vLLM plugin (plugins/vllm-gumiho) loads a Gumiho drafter from, written
from a loaded drafter of the ``gumiho`` kind; vLLM then serves it with
``{"method": "eagle", "model": FOLDER, "num_speculative_tokens": K}``. The command
is ``python -m gumiho.export gumiho`` (gumiho.export.gumiho).

The layout (the plugin's vllm_gumiho/model.py says how it reads it):

* ``config.json``: ``architectures: ["EagleGumihoForCausalLM"]`` (vLLM's EAGLE method
  keeps a name that begins with "Eagle"), ``model_type: "llama"`` and the Llama keys of
  the drafter's serial Transformer (width, heads, KV heads, head size, MLP width, layers,
  norm epsilon, rotary settings, the target's vocabulary and context length), and a
  ``gumiho`` dict: ``format``, ``serial_positions``, ``mlp_heads``, ``mlp_blocks``,
  ``first_layer_input_norm``, ``draft_vocab_size``, and where it came from;
* ``model.safetensors``: the drafter's own tensors under this engine's names (``fc.*``,
  ``layers.{i}.*``, ``heads.{j}.{b}.linear.*``, ``draft_vocab_ids``), an official
  checkpoint's ``mlp.*`` already renamed ``heads.*`` by gumiho.formats.official. No embedding and
  no LM head: vLLM gives the drafter the target's.

Refused in words: kinds other than ``gumiho`` (``eagle3`` has its own layout,
gumiho.formats.eagle3; the others have no vLLM loader), and Gumiho drafters the plugin
cannot run as this engine does (fused target layers, another number of serial
positions, heads that read another input width)."""
from __future__ import annotations

import json
import os

import torch

from ..errors import GumihoError

ARCHITECTURE = "EagleGumihoForCausalLM"  # the plugin registers this name (vllm_gumiho.ARCHITECTURE)
FORMAT = 1  # the plugin's vllm_gumiho.model.FORMAT
SERIAL_POSITIONS = 2
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def check_servable(cfg) -> None:
    """Refuse, in words, a drafter the plugin cannot serve exactly as this engine runs it."""
    if cfg.kind != "gumiho":
        hint = ("export it with `python -m gumiho.export eagle3` (vLLM's own eagle3 method serves it)"
                if cfg.kind == "eagle3" else "no vLLM loader serves it; train a gumiho or eagle3 drafter instead")
        raise GumihoError(f"This export writes drafters of the gumiho kind; this one is of the {cfg.kind!r} kind: "
                          f"{hint}.")
    if cfg.serial_positions != SERIAL_POSITIONS or cfg.num_layers < 1:
        raise GumihoError(f"The vLLM plugin serves Gumiho drafters with {SERIAL_POSITIONS} serial positions; this one "
                          f"has {cfg.serial_positions} (and {cfg.num_layers} layers).")
    if cfg.feature_layers:
        raise GumihoError(f"This drafter reads the target's fused layers {list(cfg.feature_layers)}; the vLLM plugin "
                          f"hands a Gumiho drafter the target's final state only (as vLLM's EAGLE method does), so it "
                          f"cannot serve it. Serve a drafter trained without --feature-layers.")
    if cfg.head_inputs != 2:
        raise GumihoError(f"The drafter's MLP heads read {cfg.head_inputs} serial inputs; the plugin feeds them two.")


def exported_config(drafter, target_config, source: str = "") -> dict:
    cfg = drafter.cfg
    text = getattr(target_config, "get_text_config", lambda: target_config)()
    rope = {"rope_type": "default", "rope_theta": float(cfg.rope_theta)}
    if cfg.rope_scaling:
        rope = {**{k: v for k, v in cfg.rope_scaling.items() if k != "type"}, "rope_theta": float(cfg.rope_theta),
                "rope_type": cfg.rope_scaling.get("rope_type", cfg.rope_scaling.get("type"))}
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "num_hidden_layers": cfg.num_layers,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": float(cfg.rope_theta),
        "rope_parameters": rope,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": int(getattr(text, "max_position_embeddings", None) or 8192),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "gumiho": {"format": FORMAT, "serial_positions": cfg.serial_positions, "mlp_heads": cfg.mlp_heads,
                   "mlp_blocks": cfg.mlp_blocks, "first_layer_input_norm": bool(cfg.first_layer_input_norm),
                   "draft_vocab_size": int(drafter.draft_vocab_ids.numel()), "target": cfg.target,
                   "source": source},
    }


def exported_tensors(drafter, dtype: torch.dtype = torch.float32) -> dict:
    """The drafter's tensors under the names the plugin reads: the engine's own."""
    out = {}
    for name, t in drafter.state_dict().items():
        t = t.detach().to("cpu").contiguous()
        if name == "draft_vocab_ids":
            out[name] = t.to(torch.int64)
        elif isinstance(getattr(drafter.layers[0], "input_layernorm", None), torch.nn.Identity) and \
                name.startswith("layers.0.input_layernorm"):
            continue
        else:
            out[name] = t.to(dtype) if t.is_floating_point() else t
    return out


def write_gumiho(drafter, folder: str, target_config, dtype: torch.dtype = torch.float32,
                 source: str = "") -> list[str]:
    """Write ``drafter`` (a loaded gumiho-kind Drafter) to ``folder``; returns the files."""
    from ..files.tensors import save_tensors

    check_servable(drafter.cfg)
    os.makedirs(folder, exist_ok=True)
    config_path, weights_path = os.path.join(folder, CONFIG_FILE), os.path.join(folder, WEIGHTS_FILE)
    save_tensors(exported_tensors(drafter, dtype), weights_path, metadata={"format": "pt"})
    config = exported_config(drafter, target_config, source)
    config["dtype"] = {torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(dtype, "float32")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    return [config_path, weights_path]
