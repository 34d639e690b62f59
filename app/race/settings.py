"""The words and choices of the race's settings: the tree shapes, the weights the
default model can race on here, and what the paper's tree and the advanced box
are for."""
from __future__ import annotations

import gradio as gr

from gumiho.loading import llamacpp_available

from ..core import zerogpu
from ..core.access import Access
from ..core.forms import (
    DEVICE_TREE,
    PAPER_SHAPE,
    PAPER_TREE_SETTINGS,
    SIZED_SHAPE,
    WEIGHTS_AS_STORED,
    WEIGHTS_FLOAT32,
)

COST_AWARE_HINT = "keep only drafts likely enough to pay for the longer verify here"
TREE_SHAPES = [("sized for this machine (the controls below)", SIZED_SHAPE),
               (f"the paper's deep tree ({PAPER_TREE_SETTINGS.total_tokens} + {PAPER_TREE_SETTINGS.full_tree_tokens} "
                f"nodes, depth {PAPER_TREE_SETTINGS.depth}: every head drafts)", PAPER_SHAPE)]


# Hints are one or two lines (issue 71): the details are in docs/llamacpp.md and the result line.
WEIGHTS_INFO = ("The default model only. float32 (the default): PyTorch, where a verify costs about one forward, "
                "so the whole hybrid drafter pays. As stored: the 4-bit file in llama.cpp, faster for every method, "
                "where speculation loses on a CPU; drafters reading inner layers (EAGLE-3) run on float32 only.")


AS_STORED_LABEL = "4-bit, as the file stores them (llama.cpp)"
UNAVAILABLE = " (unavailable here)"


def weights_choices(runtime: str, native_note: str = "") -> list[tuple[str, str]]:
    """The weights this server can race the default model on, the race's default
    first: float32, where the hybrid drafter pays; "as stored" where the hub's default
    load runs the file in llama.cpp (``runtime``: ModelHub.runtime, app.models.hub.runtime_for),
    marked unavailable when that runtime died in its trial here (``native_note``: the
    loaded target's runtime_note)."""
    choices = [("float32, dequantised (PyTorch)", WEIGHTS_FLOAT32)]
    if runtime == "llama.cpp":
        choices.append((AS_STORED_LABEL + (UNAVAILABLE if native_note else ""), WEIGHTS_AS_STORED))
    return choices


def weights_info(native_note: str = "", choice: str = "") -> str:
    """WEIGHTS_INFO, and why the 4-bit choice is missing or unavailable when this server
    cannot offer it; when it can, how it runs here (``choice``: the loaded model's
    runtime, load setting and why, Target.runtime_choice)."""
    if choice and not native_note:
        return WEIGHTS_INFO + f" Here: {choice}."
    if native_note:
        return WEIGHTS_INFO + f" The 4-bit runtime is unavailable on this server: {native_note}."
    if zerogpu.model_device() != "cpu":
        return WEIGHTS_INFO + " On a GPU the default model runs in PyTorch only."
    if not llamacpp_available():
        return (WEIGHTS_INFO + " The 4-bit runtime is not installed on this server (a Space installs wheels only): "
                "race it on your own machine after `pip install llama-cpp-python==0.3.36`.")
    return WEIGHTS_INFO


# What the tree controls say while the paper's tree is chosen: its values, fixed.
PAPER_TREE_HINT = ("the paper's tree: fixed at these values (choose \"sized for this machine\" above to change "
                   "the tree)")
TREE_HINTS = {"depth": "", "top_k": "branching of the serial steps",
              "budget": "drafted tokens per step (the most, when sized by cost)"}


def tree_controls(shape: str, current: dict, saved) -> dict:
    """The tree controls for the chosen shape. The paper's tree ignores them, so they
    show its values, greyed, with a hint saying so (they showed the sized tree's depth
    3, top-k 4 and budget 5 beside it); what they held is kept in ``saved`` and given
    back when the sized tree is chosen again. ``current``: the controls' values now
    (depth, top_k, budget, cost_aware)."""
    paper = PAPER_TREE_SETTINGS
    if shape == PAPER_SHAPE:
        keep = saved if saved is not None else dict(current)  # chosen twice: the sized values stay kept
        shown = {"depth": paper.depth, "top_k": paper.serial_top_k, "budget": paper.total_tokens,
                 "cost_aware": paper.cost_aware}
        out = {name: (gr.Checkbox if name == "cost_aware" else gr.Slider)(value=value, interactive=False,
                                                                          info=PAPER_TREE_HINT)
               for name, value in shown.items()}
        return {**out, "saved": keep}
    if saved is None:  # already sized: nothing to give back
        return {}
    out = {name: gr.Slider(value=saved[name], interactive=True, info=TREE_HINTS[name] or None)
           for name in ("depth", "top_k", "budget")}
    out["cost_aware"] = gr.Checkbox(value=saved["cost_aware"], interactive=True, info=COST_AWARE_HINT)
    return {**out, "saved": None}


def paper_tree_note() -> str:
    """What the paper's tree costs here, said before it is picked."""
    if DEVICE_TREE.depth >= PAPER_TREE_SETTINGS.depth:
        return "On this GPU the race's own tree is the paper's already."
    return ("Every head drafts, so every head shows. On a CPU a step verifying some 70 tokens costs several "
            "plain ones: Gumiho then usually runs slower than vanilla. A tree for teaching, not for speed.")


def advanced_note(access: Access) -> str:
    """What the advanced box takes: on a public deployment, only what its operator lists."""
    if access.public:
        extra = " Folders on this server are accepted too." if access.local_paths else ""
        return ("This public demo loads only the models it lists: " + ", ".join(f"`{n}`" for n in access.listed())
                + " (a paper's pair brings its drafter; the hub models need a GPU in practice)." + extra
                + " Run the app on your own machine (`python app.py`) to try any model.")
    return ("Any Hugging Face causal LM with full attention (Llama, Qwen2, SmolLM, Mistral…): a hub id (needs the "
            "Hub to be reachable, or the model already downloaded), a local folder, or a name of the registry "
            "(such as `amd/Gumiho-vicuna-7b`, which brings its drafter). Give the folder of a drafter trained for it "
            "with `python -m gumiho.train`; without one, a random drafter is used.")
