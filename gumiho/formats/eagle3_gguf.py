"""An eagle3 drafter written as the GGUF file llama.cpp's own EAGLE-3 drafting loads
(``llama-server -m TARGET.gguf -md DRAFTER.gguf --spec-type draft-eagle3``).

llama.cpp (the source that llama-cpp-python 0.3.36 carries) runs EAGLE-3 as an
architecture of its own, ``eagle3``: an encoder (``fc`` over the target's three
layer inputs, concatenated low, middle, high) and one decoder layer that reads the
token's embedding (the target's, when the file has none) beside the fused state.
It is the engine's eagle3 kind (gumiho.drafter, the same equations), so the export
is a renaming, two reshapes and the header:

    engine tensor                         GGUF tensor                 note
    fuse.weight [H, 3 Ht]                 fc.weight
    layers.0.input_layernorm              blk.0.attn_norm             of the embedding
    layers.0.hidden_norm                  blk.0.attn_norm_2           of the fused state
    layers.0.self_attn.q_proj [., 2H]     blk.0.attn_q                rows permuted (below)
    layers.0.self_attn.k_proj [., 2H]     blk.0.attn_k                rows permuted (below)
    layers.0.self_attn.v_proj / o_proj    blk.0.attn_v / attn_output
    layers.0.post_attention_layernorm     blk.0.ffn_norm
    layers.0.mlp.{gate,up,down}_proj      blk.0.ffn_{gate,up,down}
    norm.weight                           output_norm.weight
    lm_head.weight [V', H]                output.weight               over the draft vocabulary
    draft_vocab_ids [V']                  d2t (int64)                 the target id of each draft
                                                                      id, absolute (not EAGLE-3's
                                                                      offsets: llama.cpp scatters
                                                                      the draft logits by it)

The rotary permutation. transformers' Llama rotates the two halves of each head
(x[j] with x[j + d/2]); llama.cpp's Llama-family rope ("normal" mode) rotates
neighbours (x[2j] with x[2j + 1]). The same rotation in both holds when each head's
rows of q and k are reordered so that row j of the first half and row j of the
second half become rows 2j and 2j + 1: per head, view the d rows as [2, d/2],
swap the two axes, flatten. (k has the key-value heads' count of heads.)

The header: ``eagle3.*`` sizes of the draft layer, ``eagle3.target_layers`` (the
fused layers: id l is the input of the target's layer l, as llama.cpp extracts it
and as the engine numbers ``feature_layers``), ``eagle3.target_hidden_size``,
``eagle3.norm_before_residual``; and the target's whole tokenizer, copied from the
target's own GGUF, since llama.cpp refuses a draft whose vocabulary differs from the
target's.

Nothing here runs llama.cpp: the file is written with the ``gguf`` package. What
llama.cpp cannot run is refused in words before anything is written.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import GumihoError
from .eagle3 import draft_ids_from_map

ARCH = "eagle3"
# The draft layer's tensors: engine name -> GGUF name (the module docstring's table).
TENSOR_NAMES = {
    "fuse.weight": "fc.weight",
    "layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "layers.0.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
# GGUF file types (llama.h's LLAMA_FTYPE): all float32, or float16 matrices.
FILE_TYPES = {"fp32": 0, "fp16": 1}

WHY_NOT_GUMIHO = (
    "llama.cpp has no Gumiho drafting: serving this kind there would take a Gumiho architecture in llama.cpp "
    "(its serial Transformer for the first positions and the MLP heads that read the serial states and the "
    "embeddings), a speculative type in common/speculative.cpp that drafts a tree with it, and tree verification "
    "in llama-server, which verifies one chain. Serve it with vLLM (python -m gumiho.serve --drafter DIR), or "
    "train an eagle3 drafter (python -m gumiho.train --kind eagle3) for llama.cpp.")


def check_exportable(cfg) -> None:
    """Refuse, in words, a drafter llama.cpp's eagle3 architecture cannot run."""
    if cfg.kind == "gumiho":
        raise GumihoError(WHY_NOT_GUMIHO)
    if cfg.kind != "eagle3":
        raise GumihoError(f"A drafter of the {cfg.kind!r} kind cannot be written for llama.cpp: its EAGLE-3 drafting "
                          f"runs the eagle3 kind alone (train one with python -m gumiho.train --kind eagle3).")
    if cfg.num_layers != 1:
        raise GumihoError(f"llama.cpp's eagle3 architecture has one decoder layer; this drafter has "
                          f"{cfg.num_layers}.")
    if not cfg.feature_layers or len(cfg.feature_layers) != 3:
        raise GumihoError("llama.cpp's eagle3 architecture fuses exactly three target layers; this drafter fuses "
                          f"{len(cfg.feature_layers or ())}.")
    if cfg.rope_scaling:
        raise GumihoError(f"This drafter uses rope scaling {cfg.rope_scaling.get('rope_type', cfg.rope_scaling)!r}, "
                          f"which the llama.cpp export does not write; export it for vLLM instead.")


def rotary_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """q or k rows reordered from transformers' half-split rotary layout to llama.cpp's
    neighbouring pairs (module docstring): per head, [2, d/2] rows -> [d/2, 2]."""
    rows, cols = weight.shape
    if rows % (2 * heads):
        raise GumihoError(f"A projection of {rows} rows cannot be split into {heads} heads of pairs.")
    per_head = rows // heads
    return weight.reshape(heads, 2, per_head // 2, cols).transpose(1, 2).reshape(rows, cols)


def _target_fields(target_gguf: str):
    from gguf import GGUFReader

    try:
        reader = GGUFReader(target_gguf)
    except (OSError, ValueError) as e:
        raise GumihoError(f"The target file {target_gguf!r} cannot be read as GGUF ({e!s:.120}).") from None
    return reader.fields


def _field_value(fields, key: str):
    field = fields.get(key)
    return None if field is None else field.contents()


def check_target(cfg, fields, target_gguf: str) -> dict:
    """The target file's sizes, checked against the drafter: its tokenizer is copied
    into the drafter's file, and its layer inputs are what the drafter fuses."""
    arch = _field_value(fields, "general.architecture")
    if arch is None:
        raise GumihoError(f"The target file {target_gguf!r} has no general.architecture: not a model GGUF.")
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise GumihoError(f"The target file {target_gguf!r} carries no tokenizer, which the drafter's file must copy.")
    sizes = {"vocab": len(tokens.data), "hidden": _field_value(fields, f"{arch}.embedding_length"),
             "layers": _field_value(fields, f"{arch}.block_count"),
             "context": _field_value(fields, f"{arch}.context_length") or 4096}
    if sizes["hidden"] != cfg.hidden_size:
        raise GumihoError(f"This drafter was made for a target {cfg.hidden_size} wide; {os.path.basename(target_gguf)} "
                          f"is {sizes['hidden']} wide. Give the GGUF of the drafter's own target.")
    if sizes["vocab"] != cfg.vocab_size:
        raise GumihoError(f"This drafter was made for a vocabulary of {cfg.vocab_size} tokens; "
                          f"{os.path.basename(target_gguf)} has {sizes['vocab']}. Give the GGUF of the drafter's "
                          f"own target.")
    if sizes["layers"] is not None and max(cfg.feature_layers) >= sizes["layers"]:
        raise GumihoError(f"This drafter fuses target layer {max(cfg.feature_layers)}; "
                          f"{os.path.basename(target_gguf)} has {sizes['layers']} layers.")
    return sizes


def gguf_tensors(drafter, dtype: str = "fp16") -> dict[str, np.ndarray]:
    """The drafter's tensors under their GGUF names, as numpy arrays: matrices in
    ``dtype``, norms in float32 (as llama.cpp's converter keeps one-dimensional
    tensors), the draft vocabulary as absolute target ids."""
    cfg = drafter.cfg
    state = {k: v.detach().float().cpu() for k, v in drafter.state_dict().items() if k != "draft_vocab_ids"}
    missing = sorted(set(TENSOR_NAMES) - set(state))
    extra = sorted(set(state) - set(TENSOR_NAMES))
    if missing or extra:
        raise GumihoError(f"This eagle3 drafter's tensors do not match llama.cpp's eagle3 layout "
                          f"(missing {missing[:3]}, unexpected {extra[:3]}).")
    state["layers.0.self_attn.q_proj.weight"] = rotary_rows(state["layers.0.self_attn.q_proj.weight"],
                                                            cfg.num_attention_heads)
    state["layers.0.self_attn.k_proj.weight"] = rotary_rows(state["layers.0.self_attn.k_proj.weight"],
                                                            cfg.num_key_value_heads)
    matrix = np.float16 if dtype == "fp16" else np.float32
    out = {}
    for name, gguf_name in TENSOR_NAMES.items():
        t = state[name].numpy()
        out[gguf_name] = t.astype(np.float32 if t.ndim == 1 else matrix)
    ids = drafter.draft_vocab_ids.detach().cpu().long()
    if ids.numel() != out["output.weight"].shape[0]:
        raise GumihoError("This drafter's draft vocabulary and its LM head disagree in size.")
    out["d2t"] = ids.numpy().astype(np.int64)
    return out


def write_eagle3_gguf(drafter, out_path: str, target_gguf: str, dtype: str = "fp16") -> dict:
    """Write ``drafter`` (the eagle3 kind) as a GGUF file for llama.cpp's EAGLE-3
    drafting beside ``target_gguf`` (the target's own GGUF, whose tokenizer is copied).
    Returns what was written (sizes, fused layers)."""
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    cfg = drafter.cfg
    check_exportable(cfg)
    if dtype not in FILE_TYPES:
        raise GumihoError(f"dtype must be one of {', '.join(FILE_TYPES)}, got {dtype!r}.")
    fields = _target_fields(target_gguf)
    tensors = gguf_tensors(drafter, dtype)
    sizes = check_target(cfg, fields, target_gguf)
    ids = tensors["d2t"]
    # The map's own checks (inside the vocabulary, no two draft ids on one target id), as
    # the EAGLE-3 reader checks a checkpoint's offsets.
    draft_ids_from_map(torch.from_numpy(ids) - torch.arange(ids.size), None, ids.size, sizes["vocab"])

    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    part = out_path + ".part"
    writer = GGUFWriter(part, ARCH)
    writer.add_name(f"{cfg.target or 'target'} EAGLE-3 drafter")
    writer.add_file_type(FILE_TYPES[dtype])
    writer.add_uint32(f"{ARCH}.block_count", cfg.num_layers)
    writer.add_uint32(f"{ARCH}.context_length", int(sizes["context"]))
    writer.add_uint32(f"{ARCH}.embedding_length", cfg.hidden_size)
    writer.add_uint32(f"{ARCH}.feed_forward_length", cfg.intermediate_size)
    writer.add_uint32(f"{ARCH}.attention.head_count", cfg.num_attention_heads)
    writer.add_uint32(f"{ARCH}.attention.head_count_kv", cfg.num_key_value_heads)
    writer.add_uint32(f"{ARCH}.attention.key_length", cfg.head_dim)
    writer.add_uint32(f"{ARCH}.attention.value_length", cfg.head_dim)
    writer.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", float(cfg.rms_norm_eps))
    writer.add_float32(f"{ARCH}.rope.freq_base", float(cfg.rope_theta))
    writer.add_uint32(f"{ARCH}.rope.dimension_count", cfg.head_dim)
    writer.add_uint32(f"{ARCH}.vocab_size", int(sizes["vocab"]))
    writer.add_array(f"{ARCH}.target_layers", [int(layer) for layer in cfg.feature_layers])
    writer.add_uint32(f"{ARCH}.target_hidden_size", int(sizes["hidden"]))
    writer.add_bool(f"{ARCH}.norm_before_residual", bool(cfg.norm_before_residual))
    writer.add_bool(f"{ARCH}.norm_before_fc", False)
    for key, field in fields.items():  # the target's tokenizer, as it is
        if not key.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), main, sub_type=sub)
    for gguf_name, array in tensors.items():
        raw = GGMLQuantizationType.I64 if gguf_name == "d2t" else None
        writer.add_tensor(gguf_name, array, raw_dtype=raw)
    try:
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
        os.replace(part, out_path)  # whole or not at all: a reader never finds half a file
    finally:
        if os.path.exists(part):
            os.remove(part)
    return {"draft_vocab": int(ids.size), "target_layers": list(cfg.feature_layers), "dtype": dtype,
            "vocab": int(sizes["vocab"])}
