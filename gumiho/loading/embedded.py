"""The embedded default target as transformers reads it, converted once.

transformers reads a GGUF file three times over to load it (its config, its tokenizer,
its tensors), parsing every metadata field in Python each time: about 30 s on two cores
for a 98 MB file, every load. The first load therefore writes what it read (float32
weights, tokenizer, config) as an ordinary transformers folder in the cache, and later
loads read that folder instead, in a second or two and with the weights memory-mapped.

The folder is named by the GGUF file's key (path, size, time) and transformers' version,
so a new file or a new transformers converts again. It is written beside its final name
and renamed into place, so a load never sees half a folder, and two processes converting
at once both end with a whole one. Where the cache cannot be written or read, the load
reads the GGUF file as before, with one logged line: never an error of its own."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ..files import cache_root, fingerprint

log = logging.getLogger("gumiho")

# Raised when what is written changes, so that no older folder is read as a newer one.
FORMAT = "1"
# Written last: a folder without it was cut short and is never read.
DONE_MARK = "converted.txt"


def converted_folder(gguf_path: str) -> Path:
    import transformers

    stem = Path(gguf_path).stem.lower().replace(".", "-")
    return cache_root() / "targets" / f"{stem}-{fingerprint(gguf_path)}-tf{transformers.__version__}-v{FORMAT}"


def load_embedded(folder: str, gguf: str, dtype: torch.dtype):
    """Tokenizer and model of the GGUF file ``folder/gguf``: from its converted folder
    when there is one, else from the file (then converted for the next load)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.path.join(folder, gguf)
    converted = converted_folder(path)
    if (converted / DONE_MARK).is_file():
        try:
            tok = AutoTokenizer.from_pretrained(converted)
            return tok, AutoModelForCausalLM.from_pretrained(converted, dtype=dtype)
        except Exception as e:  # a folder damaged since: read the file, write the folder again
            log.warning("The converted copy of %s could not be read (%s); reading the GGUF file.", gguf,
                        str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
            shutil.rmtree(converted, ignore_errors=True)
    tok, model = read_gguf(folder, gguf)
    _write(converted, tok, model)
    return tok, model.to(dtype) if dtype != torch.float32 else model


def read_gguf(folder: str, gguf: str):
    """Tokenizer and float32 model as transformers reads them from the GGUF file (the
    slow read). Float32, the file's dequantised values, is what is kept; another dtype
    is a cast of it, as transformers' GGUF loader casts the same float32 values."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    return tok, AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32)


def _write(converted: Path, tok, model) -> None:
    try:
        converted.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=converted.name + ".", dir=converted.parent))
    except OSError as e:
        log.info("The default model is not kept converted (%s); the next load reads its GGUF file again.", e)
        return
    try:
        _write_folder(work, tok, model)
        work.chmod(0o755)  # mkdtemp's folder is its owner's only; the cache's others are not
        os.rename(work, converted)
    except Exception as e:  # another process renamed its own first (ENOTEMPTY, EEXIST), a full disk
        if not (converted / DONE_MARK).is_file():
            log.info("The default model is not kept converted (%s); the next load reads its GGUF file again.", e)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_folder(work: Path, tok, model) -> None:
    """The model's float32 tensors (a tied LM head left out: it is the embedding, and
    transformers ties it again on load), its config without the GGUF quantisation entry
    (transformers would look for a GGUF file again), its generation config and tokenizer."""
    import copy

    from ..files.tensors import save_tensors, weights_to_save

    save_tensors(weights_to_save(model, torch.float32), str(work / "model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(work)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(work)
    tok.save_pretrained(work)
    (work / DONE_MARK).write_text("written from the GGUF file by gumiho.loading.embedded\n")
