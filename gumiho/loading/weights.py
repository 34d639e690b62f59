"""A target's config and weights checked before transformers allocates the model:
no code that comes with a model is run, and weights that do not fill the model its
config describes are refused (random values would fill the gaps)."""
from __future__ import annotations

import os
import re

import torch

from ..errors import GumihoError
from ..files.checkpoint import checkpoint_shapes, compare_shapes, local_file, meta_shapes


def model_config(name: str):
    """The model's config, refusing a model that needs its own Python code: gumiho
    never runs code that comes with a model (transformers would ask on stdin, or with
    trust_remote_code=True run the repo's .py files)."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw, _ = PretrainedConfig.get_config_dict(name)
    auto_map = raw.get("auto_map") if isinstance(raw, dict) else None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if auto_map and model_type not in CONFIG_MAPPING:
        where = ", ".join(f"{k} -> {v}" for k, v in list(auto_map.items())[:3]) if isinstance(auto_map, dict) \
            else str(auto_map)[:80]
        raise GumihoError(f"Model {name!r} needs its own Python code to load (config.json's auto_map: {where}), "
                          f"and gumiho never runs code that comes with a model. Use a model transformers "
                          f"supports natively (Llama, Qwen2, SmolLM, Mistral...).")
    return AutoConfig.from_pretrained(name, trust_remote_code=False)


def verify_target_weights(name: str, config) -> None:
    """Refuse a target whose weights do not fill the model its config describes,
    before from_pretrained allocates it and fills the gaps with random values (see
    gumiho.files.checkpoint). The model is built on the meta device for its shapes; the
    checkpoint's names go through transformers' own renaming rules (legacy names, a
    base model's checkpoint without the head's prefix) before they are compared."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import cached_file

    if getattr(config, "quantization_config", None) is not None:
        return  # a quantizer rewrites names and shapes; the loading report below still checks it
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    expected = meta_shapes(model)

    def locate(fname):
        if os.path.isdir(name):
            return local_file(name)(fname)
        return cached_file(name, fname, _raise_exceptions_for_missing_entries=False)

    found = checkpoint_shapes(name, locate)
    rename = _checkpoint_renamer(model, expected)
    renamed, reshaped = {}, set()
    for key, shape in found.items():
        new, converted = rename(key)
        renamed[new] = shape
        if converted:
            reshaped.add(new)
    ignore = [re.compile(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    tied = set(getattr(model, "all_tied_weights_keys", None) or {})
    compare_shapes(expected, renamed, f"The checkpoint of model {name!r}",
                   "Give the folder with all of the model's weights files next to the config.json they were "
                   "saved with.", may_miss=tied,
                   may_add=lambda k: k.endswith("rotary_emb.inv_freq") or any(p.search(k) for p in ignore),
                   any_shape=reshaped)


def _checkpoint_renamer(model, expected: dict):
    """checkpoint key -> (model key, whether a conversion reshapes it), by the rules
    from_pretrained applies; without them (another transformers), the base-model
    prefix alone."""
    prefix = getattr(model, "base_model_prefix", "") or ""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, rename_source_key

        transforms = get_model_conversion_mapping(model)
        renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
        converters = [t for t in transforms if isinstance(t, WeightConverter)]

        def rename(key):
            new, pattern = rename_source_key(key, renamings, converters, prefix or None, expected)
            return new, pattern is not None
        return rename
    except (ImportError, AttributeError, TypeError):
        def rename(key):
            if key not in expected and prefix and f"{prefix}.{key}" in expected:
                return f"{prefix}.{key}", False
            return key, False
        return rename
