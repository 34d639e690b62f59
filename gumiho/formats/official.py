"""Loading the drafters released with the Gumiho paper (hub repos ``amd/Gumiho-*``).

Those repos hold only the weights (``pytorch_model.bin``): no config. The drafter's
shape follows from its target, so the config is derived from the target's own HF
config, the same way the engine sizes its drafters:

* width, attention heads (and grouped KV heads), MLP width, RoPE theta: the target's;
* two Llama decoder layers, the first without an input norm (its input is the fc
  projection, not a residual stream); no attention biases; ``fc`` with a bias;
* two serial draft positions, then five MLP heads, each one SiLU block 2H -> H
  without residual followed by five residual SiLU blocks H -> H, reading the fc
  inputs of the last two serial steps, concatenated (older first);
* no final norm and no LM head of its own: the drafter's output goes straight
  through the target's LM head, and its input hidden states are the target's last
  hidden states after the target's final norm.

Official key names and how they map onto :class:`gumiho.drafter.Drafter`:

    fc.{weight,bias}                                  same
    layers.{0,1}.self_attn.{q,k,v,o}_proj.weight      same
    layers.{0,1}.mlp.{gate,up,down}_proj.weight       same
    layers.{0,1}.post_attention_layernorm.weight      same
    layers.1.input_layernorm.weight                   same (layer 0 has none)
    mlp.{j}.{b}.linear.{weight,bias}                  heads.{j}.{b}.linear.{weight,bias}
    embed_tokens.weight                               not used: the target's embedding
                                                      is (its shape is still checked)

Weights are read safely: ``pytorch_model.bin`` with ``torch.load(weights_only=True)``
(a pickle that holds anything but tensors is refused), or a ``.safetensors`` file.
A checkpoint whose keys or shapes do not fit the target is refused with a message
naming the key and both shapes.
"""
from __future__ import annotations

import os
import re
from typing import Optional

import torch

from ..drafter import Drafter, DrafterConfig
from ..errors import GumihoError
from ..files.checkpoint import first_line, read_checkpoint

# RMSNorm epsilon the released drafters were trained with (the authors' per-target
# drafter configs); where it differs from the target's own, the target's would be
# used otherwise. Tiny either way, but kept exact.
TRAINED_RMS_NORM_EPS = {
    "amd/gumiho-vicuna-7b": 1e-6, "amd/gumiho-vicuna-13b": 1e-5,
    "amd/gumiho-llama2-7b": 1e-6, "amd/gumiho-llama2-13b": 1e-5, "amd/gumiho-llama2-70b": 1e-5,
    "amd/gumiho-llama3-8b": 1e-5, "amd/gumiho-llama3-70b": 1e-5,
}
# Files looked for in a local folder or a hub repo, in this order.
CHECKPOINT_FILES = ("pytorch_model.bin", "model.safetensors")
CHECKPOINT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors")
EMBED_KEY = "embed_tokens.weight"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


# ----------------------------------------------------------------------------- config


def official_config(target_config, target_name: str = "", rms_norm_eps: Optional[float] = None,
                    source: str = "") -> DrafterConfig:
    """The DrafterConfig of an official Gumiho drafter for a target (HF config).
    ``rms_norm_eps`` overrides the target's when the authors' drafter used another."""
    overrides = dict(num_layers=2, mlp_blocks=5, first_layer_input_norm=False, draft_vocab_size=None,
                     target=target_name, extra={"format": "official", "source": source})
    if rms_norm_eps is not None:
        overrides["rms_norm_eps"] = float(rms_norm_eps)
    return DrafterConfig.for_target(target_config, "gumiho", **overrides)


def to_engine_key(key: str) -> str:
    """Official state-dict key -> the engine Drafter's key (see the module docstring)."""
    if key.startswith("mlp.mlp."):  # the authors' in-memory name for the same heads
        key = key[len("mlp."):]
    if key.startswith("mlp."):
        return "heads." + key[len("mlp."):]
    return key


def to_official_key(key: str) -> str:
    return "mlp." + key[len("heads."):] if key.startswith("heads.") else key


# ----------------------------------------------------------------------------- files


def looks_like_hub_id(source: str) -> bool:
    """'org/name' that is not an existing local path."""
    return bool(_HUB_ID.match(source)) and not os.path.exists(source)


def is_official_source(source: str) -> bool:
    """True for what :func:`load_official` reads and an engine drafter folder is not:
    a checkpoint file, a folder without the engine's config.json, or a hub id."""
    if not isinstance(source, str) or not source.strip():
        return False
    source = os.path.expanduser(source.strip())
    if os.path.isfile(source):
        # Only a file named like a checkpoint: any other file (a text file, say) is no
        # drafter, and is answered as a path that holds none (see load_drafter).
        return source.endswith(CHECKPOINT_SUFFIXES)
    if os.path.isdir(source):
        return not os.path.exists(os.path.join(source, "config.json")) and any(
            os.path.exists(os.path.join(source, f)) for f in CHECKPOINT_FILES)
    return looks_like_hub_id(source)


def checkpoint_file(source: str, revision: Optional[str] = None) -> str:
    """Local path of the checkpoint: a file, a folder holding one of CHECKPOINT_FILES,
    or a hub repo id (downloaded, or taken from the local hub cache)."""
    if not isinstance(source, str) or not source.strip():
        raise GumihoError("The drafter source is empty: give a hub id like 'amd/Gumiho-vicuna-7b' or a folder.")
    source = os.path.expanduser(source.strip())
    if os.path.isfile(source):
        return source
    if os.path.isdir(source):
        for name in CHECKPOINT_FILES:
            path = os.path.join(source, name)
            if os.path.isfile(path):
                return path
        raise GumihoError(f"Drafter folder {source!r} holds none of {', '.join(CHECKPOINT_FILES)}.")
    if not _HUB_ID.match(source):
        raise GumihoError(f"Drafter path {source!r} does not exist (and is not a hub id like 'org/name').")
    return _download(source, revision)


def _download(repo_id: str, revision: Optional[str]) -> str:
    import huggingface_hub
    from huggingface_hub import errors as hub_errors

    last = None
    for name in CHECKPOINT_FILES:
        try:
            return huggingface_hub.hf_hub_download(repo_id, name, revision=revision)
        except (hub_errors.RepositoryNotFoundError, hub_errors.GatedRepoError) as e:
            raise GumihoError(f"Hub repo {repo_id!r} cannot be read ({first_line(e)}): check the id, "
                              f"and log in (`hf auth login`) if it is gated.") from None
        except hub_errors.RevisionNotFoundError:
            raise GumihoError(f"Hub repo {repo_id!r} has no revision {revision!r}.") from None
        except (hub_errors.EntryNotFoundError, hub_errors.LocalEntryNotFoundError, OSError, ValueError) as e:
            last = e  # try the next file name; a network failure shows in the message below
    offline = getattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    hint = ("offline mode is on (HF_HUB_OFFLINE), so only files already downloaded can load" if offline
            else "check the id and the network")
    raise GumihoError(f"Could not get {' or '.join(CHECKPOINT_FILES)} from hub repo {repo_id!r} "
                      f"({first_line(last)}); {hint}. No local folder of that name exists either.")


# ----------------------------------------------------------------------------- mapping


def _shape(t) -> tuple:
    return tuple(int(s) for s in t.shape)


def map_state_dict(state: dict, cfg: DrafterConfig, expected: dict, embed_shape: tuple, target_name: str,
                   source: str) -> dict:
    """Official state dict -> engine state dict, checked against ``expected`` (engine
    key -> shape). Raises GumihoError naming the first key that does not fit."""
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    tname = target_name or "the target"
    h, v = cfg.hidden_size, cfg.vocab_size

    def other_model(key, got, want):
        hint = ""
        fc = state.get("fc.weight")
        if fc is not None and fc.dim() == 2 and int(fc.shape[0]) != h:
            hint = f" The checkpoint's hidden size is {int(fc.shape[0])}, the target's {h}."
        elif key == EMBED_KEY and len(got) == 2 and got[0] != v:
            hint = f" The checkpoint's vocabulary has {got[0]} tokens, the target's {v}."
        return GumihoError(
            f"Drafter {source!r} does not fit {tname}: key {key!r} has shape {got} in the checkpoint, but "
            f"{tname} needs {want}.{hint} Use the drafter made for this target (see gumiho.registry).")

    if EMBED_KEY in state and _shape(state[EMBED_KEY]) != tuple(embed_shape):
        raise other_model(EMBED_KEY, _shape(state[EMBED_KEY]), tuple(embed_shape))
    mapped, unexpected = {}, []
    for key in sorted(state, key=lambda k: (k != "fc.weight", k)):
        if key == EMBED_KEY or key.endswith("rotary_emb.inv_freq"):
            continue
        new = to_engine_key(key)
        if new not in expected:
            unexpected.append(key)
            continue
        t = state[key]
        if not t.is_floating_point():
            raise GumihoError(f"Drafter {source!r}: key {key!r} holds {t.dtype} values, not floating point weights.")
        if _shape(t) != expected[new]:
            raise other_model(key, _shape(t), expected[new])
        mapped[new] = t
    missing = [to_official_key(k) for k in expected if k not in mapped]
    if missing:
        raise GumihoError(
            f"Drafter {source!r} is not a complete Gumiho checkpoint: {len(missing)} key(s) missing, e.g. "
            f"{', '.join(repr(k) for k in missing[:4])}. An official drafter has fc, layers.0-1 (layer 0 without "
            f"input_layernorm) and MLP heads mlp.0-4, blocks 0-5.")
    if unexpected:
        raise GumihoError(
            f"Drafter {source!r} has {len(unexpected)} key(s) an official Gumiho drafter does not have, e.g. "
            f"{', '.join(repr(k) for k in unexpected[:4])}: it is another kind of checkpoint (or a variant with "
            f"more layers, heads or biases), which this loader does not read.")
    return mapped


# ----------------------------------------------------------------------------- loading


def load_official(source: str, target, rms_norm_eps: Optional[float] = None,
                  revision: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> Drafter:
    """An official Gumiho drafter (hub id, folder or file) for ``target`` (a loaded
    :class:`gumiho.engine.target.Target`), on the target's device, attached to it. Its dtype
    is ``dtype``, by default the target's on CUDA and float32 on CPU.
    ``rms_norm_eps`` defaults to the value a released drafter was trained with (known
    by its hub id), else the target's."""
    path = checkpoint_file(source, revision)
    state = read_checkpoint(path)
    if rms_norm_eps is None:
        rms_norm_eps = TRAINED_RMS_NORM_EPS.get(str(source).strip().rstrip("/").lower())
    cfg = official_config(target.config, target.name, rms_norm_eps, source=str(source))
    with torch.device("meta"):  # shapes only: no memory, no random init of billions of weights
        model = Drafter(cfg)
    expected = {k: _shape(t) for k, t in model.state_dict().items() if k != "draft_vocab_ids"}
    embed = target.model.get_input_embeddings().weight
    mapped = map_state_dict(state, cfg, expected, _shape(embed), target.name, str(source))
    mapped["draft_vocab_ids"] = torch.arange(cfg.vocab_size, dtype=torch.long)
    model.load_state_dict(mapped, strict=True, assign=True)
    return model.ready_for(target, dtype)
