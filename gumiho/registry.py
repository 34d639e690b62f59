"""Named target/drafter pairs: the embedded default with its shipped drafters, the
drafters released with the Gumiho paper with their targets and official tree settings,
and a few well-known drafters of other projects (EAGLE-3, Medusa-1) with theirs.

    >>> from gumiho.registry import resolve
    >>> r = resolve("amd/Gumiho-vicuna-7b", device="cuda")
    >>> target = load_target(r.target, device="cuda", dtype="fp16")
    >>> drafter = r.load_drafter(target)          # then stream(..., GenerationSettings(tree=r.tree))

The authors' evaluation settings (their eval scripts) map onto TreeSettings as:
serial top-k 14 -> ``serial_top_k=14``; 64 verified tokens including the root ->
``total_tokens=63``; depth 6 in their counting (2 serial steps + 5 heads = 7 draft
positions) -> ``depth=7``; 35 tokens per head and path -> ``mlp_top_k=35``; 35 paths
kept per MLP depth -> ``mlp_keep=35``; Full Tree Attention on -> ``full_tree=True``
(the engine's exact variant, which adds up to ``full_tree_tokens`` nodes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

from .drafter import DRAFTER_KINDS
from .errors import GumihoError
from .loading import DEFAULT_TARGET, DEFAULT_TARGET_LABEL, load_drafter, shipped_drafter_path
from .tree import TreeSettings

OFFICIAL_TREE = dict(total_tokens=63, depth=7, serial_top_k=14, mlp_top_k=35, mlp_keep=35, full_tree=True,
                     full_tree_tokens=8)
# The other projects' default tree sizes: EAGLE-3 verifies 60 tokens (root included) to
# depth 7 from a top-10 beam; Medusa-1's Vicuna-7B tree has 63 nodes over its 5 heads.
EAGLE3_TREE = dict(total_tokens=59, depth=7, serial_top_k=10, full_tree=False)
MEDUSA_TREE = dict(total_tokens=63, depth=5, mlp_top_k=10, mlp_keep=10, full_tree=False)


@dataclass(frozen=True)
class Pair:
    name: str  # what users type or pick
    target: str  # target hub id, or DEFAULT_TARGET for the embedded default
    drafter: str  # hub id of an official drafter, or the kind of a shipped drafter
    official: bool  # a published hub drafter (the paper's, or another project's; GPU) vs shipped here
    label: str  # for menus
    tree: Optional[dict] = None  # TreeSettings fields; None: sized for the device

    def tree_settings(self, device=None) -> TreeSettings:
        if self.tree is not None:
            return TreeSettings(**self.tree).validate()
        return TreeSettings.for_device(device or "cpu")

    def load_drafter(self, target):
        """This pair's drafter, loaded for ``target`` (a loaded Target)."""
        if not self.official:
            path = shipped_drafter_path(self.drafter)
            if path is None:
                raise GumihoError(f"The {self.drafter} drafter for {DEFAULT_TARGET_LABEL} is not installed "
                                  f"(expected assets/drafters/smollm2-135m-{self.drafter}).")
            return load_drafter(path, target)
        return load_drafter(self.drafter, target)  # an official hub id: gumiho.formats.official reads it


def _official(short: str, target: str, label: str) -> Pair:
    return Pair(f"amd/Gumiho-{short}", target, f"amd/Gumiho-{short}", True, label, OFFICIAL_TREE)


# Kinds whose shipped drafter is listed whether or not its folder is there (a partial
# copy of the repository gets a clear "not installed"); the others, such as the
# EAGLE-2 baseline (eagle), only once their folder exists.
SHIPPED_KINDS = ("gumiho", "serial", "parallel")
OPTIONAL_SHIPPED_KINDS = tuple(k for k in DRAFTER_KINDS if k not in SHIPPED_KINDS)


def shipped_kinds() -> tuple:
    """The kinds of the default target's drafters a pair is listed for."""
    return SHIPPED_KINDS + tuple(k for k in OPTIONAL_SHIPPED_KINDS if shipped_drafter_path(k))


PAIRS: dict[str, Pair] = {p.name: p for p in [
    *[Pair(f"smollm2-135m-{kind}", DEFAULT_TARGET, kind, False, f"{DEFAULT_TARGET_LABEL} + shipped {kind} drafter")
      for kind in shipped_kinds()],
    _official("vicuna-7b", "lmsys/vicuna-7b-v1.3", "Vicuna 7B v1.3 + Gumiho (paper)"),
    _official("vicuna-13b", "lmsys/vicuna-13b-v1.3", "Vicuna 13B v1.3 + Gumiho (paper)"),
    _official("llama2-7b", "meta-llama/Llama-2-7b-chat-hf", "Llama-2-chat 7B + Gumiho (paper)"),
    _official("llama2-13b", "meta-llama/Llama-2-13b-chat-hf", "Llama-2-chat 13B + Gumiho (paper)"),
    _official("llama2-70b", "meta-llama/Llama-2-70b-chat-hf", "Llama-2-chat 70B + Gumiho (paper)"),
    _official("llama3-8b", "meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-Instruct 8B + Gumiho (paper)"),
    _official("llama3-70b", "meta-llama/Meta-Llama-3-70B-Instruct", "Llama-3-Instruct 70B + Gumiho (paper)"),
    # Other projects' drafters, read through gumiho.formats (hub, GPU).
    Pair("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "meta-llama/Llama-3.1-8B-Instruct",
         "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", True, "Llama-3.1-Instruct 8B + EAGLE-3 (EAGLE authors)", EAGLE3_TREE),
    Pair("FasterDecoding/medusa-vicuna-7b-v1.3", "lmsys/vicuna-7b-v1.3", "FasterDecoding/medusa-vicuna-7b-v1.3",
         True, "Vicuna 7B v1.3 + Medusa-1 (Medusa authors)", MEDUSA_TREE),
]}
DEFAULT_PAIR = "smollm2-135m-gumiho"


class Resolved(NamedTuple):
    target: str  # for load_target
    load_drafter: Callable  # Target -> Drafter
    tree: TreeSettings
    pair: Pair


def names() -> list[str]:
    return list(PAIRS)


def get(name: Optional[str]) -> Optional[Pair]:
    """The pair called ``name`` (case-insensitive; 'amd/' may be left out), else None."""
    if not isinstance(name, str) or not name.strip():
        return None
    key = name.strip().rstrip("/").lower()
    for pair in PAIRS.values():
        full = pair.name.lower()
        if key in (full, full.split("/", 1)[-1]):
            return pair
    return None


def resolve(name: Optional[str] = None, device=None) -> Resolved:
    """Target id, drafter loader and tree settings of a named pair (default: the
    embedded SmolLM2 with its shipped Gumiho drafter). Unknown names raise GumihoError."""
    pair = get(name or DEFAULT_PAIR)
    if pair is None:
        raise GumihoError(f"Unknown model pair {name!r}; known pairs: {', '.join(PAIRS)}.")
    return Resolved(pair.target, pair.load_drafter, pair.tree_settings(device), pair)


def lookup(name: Optional[str]) -> Optional[dict]:
    """For gumiho.bench's ``--model``/``--drafter``: ``{"model", "drafters", "tree"}`` of
    a named pair, or None when the name is not one (it is then a hub id or a path).
    The drafters map a method (gumiho/serial/parallel/eagle) to what load_drafter reads."""
    pair = get(name)
    if pair is None:
        return None
    if pair.official:
        drafters = {"gumiho": pair.drafter}
    else:
        drafters = {k: p for k in DRAFTER_KINDS if (p := shipped_drafter_path(k))}
    return {"model": pair.target, "drafters": drafters, "tree": pair.tree_settings() if pair.tree else None}
