"""The benchmark's methods: their names, the drafter folder flag of each learned one, the
transformers peer (HFGenerate), and how the command line's names and paths become the
drafters the runner decodes with (a given path, a registry pair, the shipped drafter, or
random weights with a loud warning)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ..drafter import DRAFTER_KINDS
from ..engine.target import Target
from ..loading import DEFAULT_TARGET, DEFAULT_TARGET_LABEL, load_drafter, random_drafter, shipped_drafter_path
from ..proposers import with_copy

# The learned drafters' methods are the drafter kinds (eagle: the one-layer all-serial
# EAGLE-2 baseline the paper compares Gumiho with; eagle3: EAGLE-3), so a new kind is a new method.
DRAFTER_METHODS = DRAFTER_KINDS
# The copy proposer (gumiho.proposers.copying) beside the Gumiho drafter, and alone.
COPY_METHODS = ("gumiho+copy", "copy")
# What a user would pick instead: Hugging Face generate, plain and with its prompt lookup.
HF_METHODS = ("hf", "hf-lookup")
SPECULATIVE_METHODS = DRAFTER_METHODS + COPY_METHODS
METHODS = ("vanilla",) + SPECULATIVE_METHODS + HF_METHODS
HF_LOOKUP_TOKENS = 10  # prompt_lookup_num_tokens of hf-lookup: the value transformers' documentation shows
# The drafter folder flag of each speculative method.
DRAFTER_FLAGS = {"gumiho": "--drafter", "serial": "--serial-drafter", "parallel": "--parallel-drafter",
                 "eagle": "--eagle-drafter", "eagle3": "--eagle3-drafter"}
# The clone's root (this file is gumiho/bench/methods.py): drafter paths inside it are
# recorded relative to it, so that records read the same on every machine.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class HFGenerate:
    """A peer method: transformers' own ``generate`` on the same target model,
    plain (``lookup_tokens`` 0) or with its prompt-lookup decoding."""

    lookup_tokens: int = 0

    @property
    def cfg(self):
        return None


def registry_lookup(name: Optional[str]) -> Optional[dict]:
    """A named target/drafter pair from ``gumiho.registry`` (e.g. ``smollm2-135m-gumiho``,
    ``amd/Gumiho-llama3-8b``): ``{"model", "drafters": {method: path or id}, "tree"}``,
    or None when ``name`` is not a pair's name (it is then a hub id or a path)."""
    if not name:
        return None
    try:
        from .. import registry  # noqa: F401  (optional module)
    except ImportError:
        return None
    lookup = getattr(registry, "lookup", None)
    return lookup(name) if callable(lookup) else None


def is_default_target(name: Optional[str]) -> bool:
    """Whether ``--model`` names the default target (whose drafters are shipped)."""
    return name is None or name.strip().lower() in (DEFAULT_TARGET, DEFAULT_TARGET_LABEL.lower(), "default")


def _label(path: str) -> str:
    """A drafter path as recorded in the JSON: relative to the repository when inside it."""
    full = os.path.abspath(path)
    return os.path.relpath(full, REPO_ROOT) if full.startswith(REPO_ROOT + os.sep) else path


def resolve_drafters(target: Target, methods: list[str], paths: dict, default_target: bool, seed: int,
                     warn, dtype: Optional[str] = None, copy: Optional[dict] = None,
                     hf_lookup_tokens: int = HF_LOOKUP_TOKENS) -> tuple[dict, dict]:
    """Drafters for the methods: an explicit path, else the shipped drafter of that
    kind (default target only), else random weights with a loud warning; in
    ``dtype`` (see gumiho.loading.drafter_dtype). ``gumiho+copy`` is the gumiho
    method's drafter (the same object) with the copy proposer, ``copy`` the copy
    proposer alone, each with its defaults and the CopySettings fields in ``copy``
    on top; ``hf``/``hf-lookup`` transformers' generate.
    Returns ({method: drafter or None}, {method: label})."""
    drafters, labels = {}, {}
    learned = [m for m in methods if m in DRAFTER_METHODS]
    if "gumiho+copy" in methods and "gumiho" not in learned:
        learned.append("gumiho")
    for name in learned:
        drafters[name], labels[name] = _resolve_drafter(target, name, paths, default_target, seed, warn, dtype)
    out, out_labels = {}, {}
    for name in methods:
        if name == "vanilla":
            out[name], out_labels[name] = None, None
        elif name in DRAFTER_METHODS:
            out[name], out_labels[name] = drafters[name], labels[name]
        elif name == "gumiho+copy":
            out[name], out_labels[name] = with_copy(drafters["gumiho"], **(copy or {})), labels["gumiho"]
        elif name == "copy":
            out[name], out_labels[name] = with_copy(None, **(copy or {})), "copy proposer (no learned drafter)"
        elif name == "hf":
            out[name], out_labels[name] = HFGenerate(0), "transformers generate"
        elif name == "hf-lookup":
            out[name], out_labels[name] = HFGenerate(hf_lookup_tokens), \
                f"transformers generate, prompt_lookup_num_tokens={hf_lookup_tokens}"
    return out, out_labels


def _resolve_drafter(target: Target, name: str, paths: dict, default_target: bool, seed: int, warn,
                     dtype: Optional[str]):
    """(drafter, label) of one learned-drafter method."""
    path = paths.get(name)
    if path:
        return load_drafter(path, target, dtype), _label(path)
    shipped = shipped_drafter_path(name) if default_target else None
    if shipped:
        return load_drafter(shipped, target, dtype), _label(shipped)
    why = (f"no trained {name} drafter is shipped (expected assets/drafters/smollm2-135m-{name})"
           if default_target else f"no {name} drafter was given for {target.name} (shipped drafters fit only "
                                  f"the default {DEFAULT_TARGET_LABEL})")
    warn(f"{why}; using a RANDOM-WEIGHT {name} drafter. It accepts almost nothing: its speed numbers say "
         f"nothing about Gumiho. Pass --drafter PATH (or train one with `python -m gumiho.train`).")
    return random_drafter(target, name, seed, dtype), f"random-weights ({name})"
