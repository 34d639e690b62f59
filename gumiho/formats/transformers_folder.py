"""``python -m gumiho.export target OUT``: a target written as an ordinary transformers
folder that other engines (vLLM, SGLang, plain transformers) load.

The embedded default target is a GGUF file (Q4_1) that transformers dequantises on
load; an engine that does not read that GGUF needs the weights as the engine runs
them. The folder holds: ``model.safetensors`` (the dequantised weights, float32 unless
``--dtype`` says fp16/bf16; a tied LM head is left out, as transformers saves it),
``config.json`` naming the architecture (the config transformers builds from a GGUF
has none, and vLLM then resolves the bare ``LlamaModel``) without the GGUF
quantisation entry, the tokenizer files with the chat template, and
``generation_config.json`` with the end-of-sequence ids the engine stops on.
"""
from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import GumihoError
from ..files.tensors import weights_to_save

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
WEIGHTS_FILE = "model.safetensors"
# What an export writes besides the tokenizer's own files; with --force these (and any
# other weights files, which a loader would mix with ours) are replaced.
_WRITTEN = ("config.json", "generation_config.json", "chat_template.jinja", WEIGHTS_FILE)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json", ".gguf")


@dataclass
class ExportedTarget:
    folder: Path
    architecture: str
    dtype: str
    tensors: int
    bytes: int
    seconds: float


def add_arguments(parser) -> None:
    parser.add_argument("out", help="folder to write (must not exist, or be empty, unless --force)")
    parser.add_argument("--model", default=None,
                        help="the target: the embedded default (unset), a local folder or a hub id")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="dtype of the written weights (default fp32: the weights exactly as the engine runs "
                             "them on a CPU)")
    parser.add_argument("--force", action="store_true",
                        help="write into an existing folder that is not empty, replacing its weights and config")


def run(args) -> int:
    """Write a target (the embedded default unless --model) as a transformers folder."""
    from ..loading import load_target

    folder = check_out_folder(args.out, args.force)  # before the slow load: a wrong OUT fails at once
    target = load_target(args.model, device="cpu", dtype="float32", runtime="torch")
    done = export_target(target, folder, dtype=args.dtype, force=args.force)
    print(f"Wrote {target.name} to {done.folder}: {done.architecture}, {done.tensors} tensors in {done.dtype} "
          f"({done.bytes / 1e6:.0f} MB), in {done.seconds:.1f} s.")
    return 0


def check_out_folder(out, force: bool) -> Path:
    """OUT as a folder an export may write: new, empty, or (with ``force``) any folder."""
    if out is None or not str(out).strip():
        raise GumihoError("No output folder given: name the folder to write, e.g. `python -m gumiho.export target "
                          "exports/smollm2-135m-instruct`.")
    folder = Path(os.path.expanduser(str(out).strip()))
    if folder.exists() and not folder.is_dir():
        raise GumihoError(f"The output {str(folder)!r} is a file, not a folder; name a new folder to write.")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise GumihoError(f"The output folder {str(folder)!r} exists and is not empty; name a new folder, or add "
                          f"--force to replace the model files in it.")
    return folder


def export_target(target, out, dtype: str = "fp32", force: bool = False) -> ExportedTarget:
    """Write ``target`` (a gumiho Target: the model as the engine runs it, and its
    tokenizer) to the folder ``out`` as an ordinary transformers checkpoint."""
    started = time.perf_counter()
    if dtype not in DTYPES:
        raise GumihoError(f"Unknown export dtype {dtype!r}; use one of {', '.join(sorted(DTYPES))}.")
    if target.tokenizer is None:
        raise GumihoError(f"Target {target.name} has no tokenizer; an exported folder needs one for other engines.")
    folder = check_out_folder(out, force)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_model_files(folder)
    weights = weights_to_save(target.model, DTYPES[dtype])
    _save_weights(weights, folder / WEIGHTS_FILE)
    config = exported_config(target.model.config, type(target.model).__name__, DTYPES[dtype])
    config.save_pretrained(folder)
    exported_generation_config(target).save_pretrained(folder)
    save_tokenizer(target.tokenizer, folder)
    size = sum(t.numel() * t.element_size() for t in weights.values())
    return ExportedTarget(folder=folder, architecture=config.architectures[0], dtype=dtype, tensors=len(weights),
                          bytes=size, seconds=time.perf_counter() - started)


def _remove_model_files(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_file() and (entry.name in _WRITTEN or entry.name.endswith(_WEIGHT_SUFFIXES)):
            entry.unlink()


def _save_weights(weights: dict, path: Path) -> None:
    from ..files.tensors import save_tensors

    save_tensors(weights, str(path), metadata={"format": "pt"})  # "pt": what transformers and vLLM expect


def exported_config(config, architecture: str, dtype: torch.dtype):
    """The model's config as another engine should read it: its architecture named,
    its dtype the written one, and nothing about the GGUF it came from (a
    ``quantization_config`` of method "gguf" would make loaders look for a GGUF file)."""
    config = copy.deepcopy(config)
    config.architectures = [architecture]
    config.dtype = dtype
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # The engine switches attention to its own tree-verify function; others use theirs.
    config._attn_implementation = None
    config.name_or_path = ""
    vars(config).pop("_model_name_or_path", None)  # the GGUF's own title for the model, not a path
    return config


def exported_generation_config(target):
    """The target's generation config, stopping on every id the engine stops on (the
    engine reads the config's, the generation config's and the tokenizer's EOS ids)."""
    from transformers import GenerationConfig

    source = getattr(target.model, "generation_config", None)
    generation = copy.deepcopy(source) if source is not None else GenerationConfig()
    eos = sorted(target.eos_ids)
    if eos:
        generation.eos_token_id = eos[0] if len(eos) == 1 else eos
    return generation


def save_tokenizer(tokenizer, folder: Path) -> None:
    """The tokenizer's files, and its chat template as ``chat_template.jinja`` (where
    transformers and vLLM look for it) when saving did not write one."""
    tokenizer.save_pretrained(folder)
    _drop_loading_options(folder / "tokenizer_config.json")
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template and not (folder / "chat_template.jinja").exists():
        (folder / "chat_template.jinja").write_text(template)


def _drop_loading_options(path: Path) -> None:
    """Remove how this process loaded the tokenizer (offline, from a local file) from
    its saved config: they are not properties of the tokenizer, and a loader would
    take them as its own options."""

    if not path.is_file():
        return
    with open(path) as f:
        settings = json.load(f)
    for option in ("is_local", "local_files_only"):
        settings.pop(option, None)
    with open(path, "w") as f:
        json.dump(settings, f, indent=2, ensure_ascii=False)
