"""What the user typed, checked: every problem becomes a GumihoError whose
message the UI shows as is. The limits are the app's (a shared demo on a CPU),
tighter than the engine's."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from gumiho import GenerationSettings, GumihoError, TreeSettings, registry
from gumiho.drafter import DRAFTER_KINDS
from gumiho.engine.target import check_text
from gumiho.loading import DEFAULT_TARGET_LABEL

from . import zerogpu
from .access import Access

# The limits as shipped: an operator's own reach the checks through their ``settings`` argument.
from .settings import MAX_PROMPT_TOKENS, AppSettings

# The kinds are the library's (gumiho.drafter); only their words on the page are the
# app's. The app offers a kind other than Gumiho only once its trained drafter ships
# (Hub.drafter_choices), so eagle stays off the menu until its folder exists.
DRAFTER_LABELS = {
    "gumiho": "Gumiho (2 serial + 5 MLP)",
    "serial": "All-serial (EAGLE-like)",
    "parallel": "All-parallel (Medusa-like)",
    "eagle": "EAGLE-2 (one layer, all serial)",
    "eagle3": "EAGLE-3 (fused target layers)",
}
# A kind the library gains must get its words here before the menu can show it
# (a missing label would fail only when someone picked that drafter).
if set(DRAFTER_LABELS) != set(DRAFTER_KINDS):
    raise RuntimeError(f"app.core.forms.DRAFTER_LABELS names {sorted(DRAFTER_LABELS)}, but the drafter kinds are "
                      f"{sorted(DRAFTER_KINDS)}: give every kind a label.")


MAX_PROMPT_CHARS = 40_000
MAX_TEMPERATURE = 2.0
MAX_TREE_DEPTH = 7
MAX_TREE_TOP_K = 10
MAX_TREE_NODES = 128
WALK_MAX_NEW_TOKENS = 64
# The engine's tree for the device the default model runs on (small on a CPU, the
# paper's 63 nodes on a GPU, ZeroGPU's included: app/core/zerogpu.py imports `spaces` first):
# the defaults of the controls and the MLP-depth settings that have no control.
DEVICE_TREE = TreeSettings.for_device(zerogpu.model_device())

# The paper's tree shape, as the engine drafts it on a GPU (TreeSettings.for_device):
# 63 drafted tokens to depth 7, every MLP head in use, and 8 full-tree tokens. The
# walkthrough drafts it always (a step-through has no clock to protect), the race
# when asked to (RACE_SHAPES): on a CPU it costs more verify time than it saves.
PAPER_TREE_SETTINGS = TreeSettings(total_tokens=63, depth=7, serial_top_k=10, mlp_top_k=5, mlp_keep=35, full_tree=True,
                                   full_tree_tokens=8)
# The race's tree: the controls' (sized for this machine), or the paper's.
SIZED_SHAPE, PAPER_SHAPE = "sized", "paper"
RACE_SHAPES = (SIZED_SHAPE, PAPER_SHAPE)


# The copy proposer (gumiho.proposers.copying) drafts beside the drafter unless the user turns
# it off: measured on the six prompt sets, it pays where answers repeat their context
# (summaries, code, worked maths) and costs under one percent elsewhere (BENCHMARKS.md).
COPY_DEFAULT = True

# The default model's weights in a race (gumiho.loading's runtimes): its 4-bit file as
# stored, run by llama.cpp (the library's default on a CPU where llama-cpp-python is
# installed: every method runs faster there), or dequantised to float32 in PyTorch,
# where a verify over a few tokens costs about one forward, as on a GPU, so drafting
# pays. "" is the race's default, float32. Other models always run in PyTorch.
WEIGHTS_AS_STORED, WEIGHTS_FLOAT32 = "as stored", "float32"
RACE_WEIGHTS = (WEIGHTS_AS_STORED, WEIGHTS_FLOAT32)


@dataclass
class RaceForm:
    """A race as the page's controls or the /race API's parameters give it, not yet
    checked (any value a client may send). Its field names are the API's, and every
    layer from the page or the API to the run uses them (app/race/tab.py maps the
    controls to them, app/web/api.py its parameters); :func:`parse_request` checks
    it into a :class:`Request`. None leaves a field at its default."""

    prompt: object = None
    max_new_tokens: object = 64
    temperature: object = 0.0
    top_p: object = 1.0
    seed: object = 0
    # The tree: all four None (the page's controls left as they came, or an API call that
    # names none) leaves it to the runtime the race runs on (GenerationSettings.tree_on);
    # any one given sizes it, the others taking the controls' starting values (DEVICE_TREE).
    tree_depth: object = None
    tree_top_k: object = None
    tree_nodes: object = None
    drafter: object = "gumiho"
    target: object = ""
    drafter_path: object = ""
    tree_cost_aware: object = None
    copy_from_context: object = None  # None: COPY_DEFAULT
    target_weights: object = None  # RACE_WEIGHTS, or None / "" for the default (float32)
    tree_shape: object = None  # RACE_SHAPES; None: SIZED_SHAPE


@dataclass
class Request:
    """A checked race (or walkthrough): what the run needs, under the form's names."""

    prompt: str
    settings: GenerationSettings
    drafter: str = "gumiho"  # a drafter kind (gumiho.drafter.DRAFTER_KINDS)
    target: str = ""  # a hub id, a folder or a registry name; "" for the default model
    drafter_path: str = ""
    copy_from_context: bool = False  # the copy proposer drafts beside the drafter
    target_weights: str = ""  # RACE_WEIGHTS, or "" for the default (float32)


def _number(value, name: str, what: str) -> float:
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise GumihoError(f"{name} is missing: give {what}.")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GumihoError(f"{name} must be a number ({what}); got {str(value)[:40]!r}.") from None
    if math.isnan(x) or math.isinf(x):
        raise GumihoError(f"{name} must be a finite number ({what}).")
    return x


def whole(value, name: str, lo: int, hi: int, what: str = "") -> int:
    what = what or f"a whole number from {lo} to {hi}"
    x = _number(value, name, what)
    if x != int(x):
        raise GumihoError(f"{name} must be a whole number ({what}); got {x:g}.")
    if not lo <= x <= hi:
        raise GumihoError(f"{name} must be {what}; got {int(x):,}.")
    return int(x)


def real(value, name: str, lo: float, hi: float, what: str, lo_open: bool = False) -> float:
    x = _number(value, name, what)
    if x < lo or x > hi or (lo_open and x == lo):
        raise GumihoError(f"{name} must be {what}; got {x:g}.")
    return x


def check_prompt(prompt, max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> str:
    if prompt is not None and not isinstance(prompt, str):
        raise GumihoError(f"The prompt must be text, got {type(prompt).__name__}: send it as a string.")
    if prompt is None or not prompt.strip():
        raise GumihoError("The prompt is empty: type something for the model to answer.")
    check_text(prompt, "The prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise GumihoError(
            f"The prompt has {len(prompt):,} characters; this demo takes at most {MAX_PROMPT_CHARS:,} "
            f"(and {max_prompt_tokens:,} tokens). Shorten it."
        )
    return prompt


def check_prompt_length(ids: list[int], context_length: int, model: str,
                        max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> list[int]:
    """The demo's limit on the prompt's tokens (and the model's, leaving room for one
    new token). The ids themselves are checked by the engine (gumiho.engine.decode.check_prompt_ids)."""
    cap = min(max_prompt_tokens, context_length - 1)
    if len(ids) > cap:
        raise GumihoError(
            f"The prompt is {len(ids):,} tokens long; this demo takes at most {cap:,} prompt tokens "
            f"({model} reads up to {context_length:,}, answer included). Shorten it."
        )
    return ids


def flag(value, name: str, default: bool) -> bool:
    """A yes/no control: a bool, or None for ``default`` (an API call may leave it out)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise GumihoError(f"{name} must be true or false; got {str(value)[:40]!r}.")


def text_field(value, name: str, what: str) -> str:
    """A text box's value (an API call may send anything): stripped text, "" for none."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise GumihoError(f"{name} must be text ({what}), got {type(value).__name__}.")
    return check_text(value, name).strip()


def check_pair(target_id: str, drafter_path: str) -> None:
    """Refuse, from the names alone, one of the paper's drafters given for a target it
    was not trained for (it would be fetched from the Hub, gigabytes, to fail then on
    its shapes): each official drafter names its target in the registry."""
    drafter = registry.get(drafter_path) if drafter_path else None
    if drafter is None or not drafter.official:
        return
    if target_id.strip().rstrip("/").lower() == drafter.target.lower():
        return
    given = target_id.strip() or DEFAULT_TARGET_LABEL + " (the default)"
    raise GumihoError(f"{drafter.name} is the paper's drafter for {drafter.target}, not for {given[:80]}: "
                      f"put {drafter.name} in the target box alone (it brings this drafter), or leave the "
                      f"drafter box empty.")


TREE_FIELDS = ("tree_depth", "tree_top_k", "tree_nodes", "tree_cost_aware")


def as_given(values: dict) -> dict:
    """The form's values as the visitor gave them: the tree controls show the tree
    sized for this device (DEVICE_TREE) until one is moved, and a race left at
    them runs the tree of the runtime it runs on, which the library chooses
    (GenerationSettings.tree_on: on the 4-bit weights a chain of one), so untouched
    they are sent as not given. Without a ``tree_touched`` value, as they are."""
    values = dict(values)
    if values.pop("tree_touched", True):
        return values
    return {name: None if name in TREE_FIELDS else value for name, value in values.items()}


def _tree(form: RaceForm, shape: str) -> Optional[TreeSettings]:
    """The race's tree: the paper's whatever the controls say (they are then neither
    used nor checked); None, the runtime's own, when no tree field is given; else
    the one the fields size (sized for this machine)."""
    if shape == PAPER_SHAPE:
        return PAPER_TREE_SETTINGS
    if all(getattr(form, name) is None for name in TREE_FIELDS):
        return None

    def given(value, default):
        return default if value is None else value

    return TreeSettings(
        total_tokens=whole(given(form.tree_nodes, DEVICE_TREE.total_tokens), "Tree node budget", 1, MAX_TREE_NODES),
        depth=whole(given(form.tree_depth, DEVICE_TREE.depth), "Tree depth", 1, MAX_TREE_DEPTH),
        serial_top_k=whole(given(form.tree_top_k, DEVICE_TREE.serial_top_k), "Tree top-k", 1, MAX_TREE_TOP_K),
        mlp_top_k=DEVICE_TREE.mlp_top_k, mlp_keep=DEVICE_TREE.mlp_keep, full_tree=DEVICE_TREE.full_tree,
        full_tree_tokens=DEVICE_TREE.full_tree_tokens,
        cost_aware=flag(form.tree_cost_aware, "Size trees by measured cost", DEVICE_TREE.cost_aware),
    )


def _models(form: RaceForm, access: Optional[Access]) -> tuple[str, str, str]:
    """(drafter kind, target, drafter path), checked, with a registry name resolved
    to the pair it stands for (gumiho.registry)."""
    kind = text_field(form.drafter, "The drafter", f"one of {', '.join(DRAFTER_KINDS)}") or "gumiho"
    kind = {v: k for k, v in DRAFTER_LABELS.items()}.get(kind, kind)
    if kind not in DRAFTER_KINDS:
        raise GumihoError(f"Unknown drafter {str(form.drafter)[:40]!r}; choose one of {', '.join(DRAFTER_KINDS)}.")
    target = text_field(form.target, "The target model", "a hub id like 'org/name' or a folder path")
    drafter_path = text_field(form.drafter_path, "The drafter path", "a folder path")
    if len(target) > 300 or "\n" in target:
        raise GumihoError("The model id or path is too long or has a line break; give a hub id like 'org/name' "
                          "or a folder path.")
    if len(drafter_path) > 500 or "\n" in drafter_path:
        raise GumihoError("The drafter path is too long or has a line break; give a folder path.")
    if access is not None:  # a public deployment: only what its operator allows (see app.core.access)
        access.check_target(target)
        access.check_drafter(drafter_path)
    pair = registry.get(target) if target else None
    if pair is not None and pair.official:
        target, drafter_path = pair.target, drafter_path or pair.drafter
    elif pair is not None:
        target, kind = "", pair.drafter
    check_pair(target, drafter_path)
    return kind, target, drafter_path


def parse_request(form: RaceForm, access: Optional[Access] = None, max_tokens_cap: Optional[int] = None,
                  settings: Optional[AppSettings] = None) -> Request:
    """``form`` checked: every problem a GumihoError that says what to give instead.
    ``access``: a public deployment's list of models; ``max_tokens_cap``: the most new
    tokens (default: the server's, ``settings.max_new_tokens``); ``settings``: the
    server's (None: the app's as shipped)."""
    settings = settings or AppSettings()
    cap = max_tokens_cap or settings.max_new_tokens
    shape = text_field(form.tree_shape, "The tree", f"one of {', '.join(RACE_SHAPES)}") or SIZED_SHAPE
    if shape not in RACE_SHAPES:
        raise GumihoError(f"Unknown tree {shape[:40]!r}; choose one of {', '.join(RACE_SHAPES)}.")
    prompt = check_prompt(form.prompt, settings.max_prompt_tokens)
    n = whole(form.max_new_tokens, "Max new tokens", 1, cap, f"a whole number from 1 to {cap} in this demo")
    temp = real(form.temperature, "Temperature", 0.0, MAX_TEMPERATURE,
                f"between 0 and {MAX_TEMPERATURE:g} (0 = greedy)")
    p = real(form.top_p, "Top-p", 0.0, 1.0, "above 0 and at most 1", lo_open=True)
    seed = 0 if form.seed in (None, "") else form.seed
    s = whole(seed, "Seed", 0, 2**31 - 1, "a whole number from 0 to 2147483647")
    tree = _tree(form, shape)
    kind, target, drafter_path = _models(form, access)
    settings = GenerationSettings(max_new_tokens=n, temperature=temp, top_p=p, seed=s, tree=tree).validate()
    copying = flag(form.copy_from_context, "Copy from the context", COPY_DEFAULT)
    weights = text_field(form.target_weights, "The target weights", f"one of {', '.join(RACE_WEIGHTS)}")
    if weights and weights not in RACE_WEIGHTS:
        raise GumihoError(f"Unknown target weights {weights[:40]!r}; choose one of {', '.join(RACE_WEIGHTS)}.")
    return Request(prompt, settings, kind, target, drafter_path, copying, weights)
