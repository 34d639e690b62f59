"""Loading a target: the embedded default (its GGUF file, on the runtime chosen for
it), a hub id or a local folder, on a device and in a dtype, wrapped as a Target
ready for decoding."""
from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from ..engine.target import Target
from ..errors import GumihoError
from ..files.checkpoint import first_line
from ..runtimes.llamacpp import LlamaCppRuntime, NativeRuntimeUnusable, check_runtime
from ..runtimes.llamacpp_files import layout_file, pick_layout
from ..runtimes.pytorch import TorchRuntime
from .assets import DEFAULT_TARGET, DEFAULT_TARGET_LABEL, default_target_files
from .device import pick_device, pick_dtype
from .embedded import load_embedded
from .runtime import pick_runtime, resolve_runtime
from .sources import is_model_folder, looks_like_path, no_model_folder
from .weights import model_config, verify_target_weights

log = logging.getLogger("gumiho")


def load_target(name_or_path: Optional[str] = None, device: Optional[str] = None,
                dtype: Optional[str] = None, runtime: Optional[str] = None, layout: Optional[str] = None,
                packed: bool = True) -> Target:
    """The embedded default (None or 'smollm2-135m-instruct'), a local folder, or a hub id.

    ``runtime``: 'auto' (the default: llama.cpp for the embedded GGUF on a CPU when
    llama-cpp-python is installed, else torch; see :func:`resolve_runtime`), 'torch'
    (float32 dequantised weights, any model, any device) or 'llama.cpp' (the embedded
    GGUF's packed blocks in llama.cpp, CPU only; see gumiho.runtimes.llamacpp); None: 'auto'.
    llama.cpp is tried in a child process first (once per machine, build and file:
    gumiho.runtimes.llamacpp_trust). Where it dies there, 'auto' loads on the torch
    runtime with one logged line (``target.runtime_note`` says why), and 'llama.cpp'
    asked by name raises GumihoError; the process lives either way.

    ``layout`` (llama.cpp runtime only): 'q4_1' (the default: the shipped file as it is) or
    'q4_0' (its weights rewritten once as Q4_0, whose products llama.cpp batches: faster,
    and further from the float32 weights; gumiho.runtimes.llamacpp_files); None: the default.

    ``packed``: on a CPU, the torch runtime's linear layers pre-packed (gumiho.kernels.cpulinear;
    True, the default: a verify over a few tokens then costs about one forward).
    The library reads no environment variable for any of these: the command-line entry
    points and the app read GUMIHO_RUNTIME and GUMIHO_LAYOUT and pass them here."""
    asked = pick_runtime(runtime)
    chosen_layout = pick_layout(layout)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    name = name_or_path or DEFAULT_TARGET
    if not isinstance(name, str) or not name.strip():
        raise GumihoError("The model id or path is empty; leave it unset for the default SmolLM2-135M-Instruct.")
    name = name.strip()
    embedded = name.lower() in (DEFAULT_TARGET, DEFAULT_TARGET_LABEL.lower(), "default")
    runtime = resolve_runtime(asked, embedded, dev)
    if layout is not None and runtime != "llama.cpp":
        raise GumihoError("layout= chooses the llama.cpp runtime's 4-bit file; this target runs on the torch "
                          "runtime (float32 weights). Leave layout unset, or load with runtime='llama.cpp'.")
    if runtime == "llama.cpp" and (not embedded or dev.type != "cpu"):
        raise GumihoError("The llama.cpp runtime runs the embedded GGUF model on a CPU; other models and "
                          "devices use runtime='torch'.")
    note, native_file = "", None
    if runtime == "llama.cpp":
        folder, gguf = default_target_files()
        native_file = layout_file(os.path.join(folder, gguf), chosen_layout)
        note = _native_trial(native_file, by_name=asked == "llama.cpp" or layout is not None)
        runtime = "torch" if note else runtime
    try:
        if embedded:
            tok, model = load_embedded(*default_target_files(), dt)
            label = DEFAULT_TARGET_LABEL
        else:
            as_path = looks_like_path(name)
            # transformers reads an existing local path before the hub: it must then be a model folder.
            if (as_path or os.path.exists(name)) and not is_model_folder(os.path.expanduser(name)):
                raise no_model_folder(name)
            name = os.path.expanduser(name) if as_path else name
            # trust_remote_code=False everywhere: never a question on stdin, never a repo's code run.
            config = model_config(name)
            verify_target_weights(name, config)
            tok = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
            model, info = AutoModelForCausalLM.from_pretrained(name, config=config, dtype=dt, trust_remote_code=False,
                                                               output_loading_info=True)
            # The check above runs before allocating; this is transformers' own report, after.
            gaps = list(info.get("missing_keys") or []) + [str(k) for k in info.get("mismatched_keys") or []]
            if gaps:
                raise GumihoError(f"The weights of model {name!r} do not fill the model its config describes "
                                  f"({len(gaps)} tensor(s) missing or of another shape, e.g. {sorted(gaps)[0]!r}); "
                                  f"refusing random values. Give the folder with all of the model's weights.")
            label = name
    except GumihoError:
        raise
    except Exception as e:  # OSError, ValueError, or whatever else a foreign model's files make transformers throw
        first = first_line(e)[:300]
        from huggingface_hub import constants as hub_constants

        offline = " Offline mode is on (HF_HUB_OFFLINE), so only models already downloaded can load." \
            if getattr(hub_constants, "HF_HUB_OFFLINE", False) else ""
        raise GumihoError(
            f"Could not load model {name!r}: {first}.{offline} Give a local folder with config.json and weights, "
            f"or a hub id while online (HF_HUB_OFFLINE must not be set); leave it empty for the default."
        ) from None
    model.to(dev).eval()
    # On llama.cpp the torch view serves only a caller who asks for the float32 weights:
    # its packed copies (about 1 GB for the default model) are made on its first forward.
    target = prepare_target(model, tok, label, dev, dt, packed, prepack=runtime != "llama.cpp")
    if runtime == "llama.cpp":
        lc = LlamaCppRuntime(native_file, target.context_length, weights=chosen_layout.label)
        target = Target(model, tok, label, dev, dt, runtime=lc, _torch_view=target)
    target.runtime_note = note
    return target


def _native_trial(gguf_file: str, by_name: bool) -> str:
    """Before any weights load: "" when llama.cpp passed its trial on ``gguf_file`` here
    (gumiho.runtimes.llamacpp_trust; cached after the first time), else why not, with
    one logged line, for a load that chose it by default. Asked for by name, it raises
    NativeRuntimeUnusable in words instead: never swapped behind the caller's back."""
    try:
        check_runtime(gguf_file)
        return ""
    except NativeRuntimeUnusable as e:
        if by_name:
            raise
        # No "gumiho:" of its own: the logger's name is gumiho, which a format names already.
        log.warning("%s; running on the torch runtime (float32) instead.", e.verdict.reason())
        return e.verdict.reason()


def prepare_target(model, tokenizer, name: str, device=None, dtype=None, packed: bool = True,
                   prepack: bool = True) -> Target:
    """Wrap an already loaded HF causal LM (also used by tests with tiny random models).
    ``model`` is not changed: the torch runtime runs a view of it over the same weights
    (gumiho.runtimes.pytorch.TorchRuntime.for_model; ``packed``: its linear layers
    pre-packed on a CPU; with ``prepack`` False, each packed on its first product)."""
    cfg = model.config
    text_cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    if "sliding_attention" in (getattr(text_cfg, "layer_types", None) or []):
        raise GumihoError(
            f"{name} uses sliding-window attention layers, which tree verification does not support yet; "
            f"use a model with full attention (Llama, Qwen2, SmolLM, Mistral without sliding window)."
        )
    for attr in ("final_logit_softcapping", "logit_scale"):
        if getattr(text_cfg, attr, None) not in (None, 1.0):
            raise GumihoError(f"{name} post-processes its logits ({attr}); not supported by the engine yet.")
    device = torch.device(device or next(model.parameters()).device)
    dtype = dtype or next(model.parameters()).dtype
    return Target(model=model, tokenizer=tokenizer, name=name, device=device, dtype=dtype,
                  runtime=TorchRuntime.for_model(model, device, dtype, packed, prepack))
