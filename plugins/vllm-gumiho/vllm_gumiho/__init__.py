"""vllm-gumiho: vLLM serves a Gumiho drafter under its own EAGLE method.

    vllm serve TARGET --speculative-config \\
        '{"method": "eagle", "model": GUMIHO_EXPORT, "num_speculative_tokens": 4}'

A Gumiho drafter drafts draft position 1 and 2 with a small serial Transformer, step by
step as EAGLE does, and positions 3..k with MLP heads that run all at once, each reading
the serial Transformer's inputs of the last two serial steps. vLLM 0.32 has no Gumiho
method, and its list of methods is closed; so the drafter is served as an EAGLE drafter
whose architecture, ``EagleGumihoForCausalLM``, this plugin registers, and the proposer
vLLM builds for EAGLE drafters is replaced by a subclass that, for a Gumiho drafter
only, lets vLLM's own EAGLE code run the two serial steps and then runs the heads
(vllm_gumiho.proposer). Every other drafter gets vLLM's EAGLE behaviour unchanged.

The checkpoint layout it loads (``config.json`` + ``model.safetensors``) is written by
``python -m gumiho.export gumiho`` and described in vllm_gumiho.model.

Draft sampling: greedy only (``draft_sample_method`` "greedy", vLLM's default): every
position is the drafter's argmax over its draft vocabulary, as the gumiho engine's chain
drafts it. Requests may still sample at any temperature: vLLM's rejection sampler
treats greedy drafts as one-hot proposals, which keeps the target's distribution. A
``draft_sample_method`` of "probabilistic" is refused in words, as is a
``num_speculative_tokens`` beyond what the drafter has heads for.

vLLM internals this plugin relies on (read in vLLM 0.32.0's source; a vLLM release may
change any of them, which is why the versions are pinned in TESTED_VLLM):

* the ``vllm.general_plugins`` entry point group, run in every vLLM process before the
  worker builds its model runner (vllm/plugins/__init__.py);
* ``ModelRegistry.register_model`` with a lazy "module:Class" string;
* ``EAGLEConfig`` (vllm/transformers_utils/configs/eagle.py) keeping an architecture
  name that begins with "Eagle", and copying the drafter config's own keys (here the
  nested ``gumiho`` dict) onto the config the model receives;
* the module global ``EagleProposer`` of vllm/v1/worker/gpu_model_runner.py, which the
  runner (and the CPU runner, its subclass) instantiates for ``use_eagle()`` methods and
  checks with isinstance: it is replaced by a subclass, so every check still holds;
* ``SpecDecodeBaseProposer.propose(num_speculative_tokens, ...)``
  (vllm/v1/spec_decode/llm_base_proposer.py): called with 2 it runs the first pass over
  the verified tokens and one further EAGLE step, and the drafter model is called with
  ``input_ids``, ``positions`` and ``hidden_states`` and returns ``(state, state)``;
  ``model.compute_logits`` and argmax give its draft tokens; ``self.model``,
  ``self.num_speculative_tokens`` and ``self.speculative_config`` are its attributes;
* ``_maybe_share_embeddings`` / ``_maybe_share_lm_head`` giving the drafter the target's
  ``embed_tokens`` and ``lm_head`` when its ``has_own_embed_tokens`` /
  ``has_own_lm_head`` are False;
* ``vllm.model_executor.models.llama_eagle.LlamaDecoderLayer`` (a Llama decoder layer
  whose input norm can be left out) and ``ReplicatedLinear``.
"""
from __future__ import annotations

import logging
import os

# vLLM versions this plugin was tested with; on another it refuses to serve a Gumiho
# drafter (set VLLM_GUMIHO_ALLOW_UNTESTED=1 to try anyway, at your own risk).
TESTED_VLLM = ("0.32.0",)
ARCHITECTURE = "EagleGumihoForCausalLM"
ALLOW_UNTESTED = "VLLM_GUMIHO_ALLOW_UNTESTED"
__version__ = "0.1.0"

logger = logging.getLogger("vllm_gumiho")


class GumihoPluginError(ValueError):
    """A Gumiho drafter this plugin cannot serve as asked; the message says why."""


def vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def check_vllm_version() -> None:
    """Refuse, in words, a vLLM this plugin was not tested with."""
    found = vllm_version()
    if found.split("+")[0] in TESTED_VLLM or os.environ.get(ALLOW_UNTESTED, "") == "1":
        return
    raise GumihoPluginError(
        f"vllm-gumiho {__version__} was tested with vLLM {', '.join(TESTED_VLLM)} only, and this is vLLM "
        f"{found}: it relies on vLLM internals (listed in vllm_gumiho's docstring and README) that another "
        f"release may have changed, so it does not serve a Gumiho drafter here. Install a tested vLLM, or set "
        f"{ALLOW_UNTESTED}=1 to try anyway.")


def register() -> None:
    """The ``vllm.general_plugins`` entry point: run by vLLM in each of its processes."""
    from vllm import ModelRegistry

    ModelRegistry.register_model(ARCHITECTURE, "vllm_gumiho.model:EagleGumihoForCausalLM")
    try:
        check_vllm_version()
    except GumihoPluginError as e:
        # Not raised here: that would stop every vLLM start, with or without a Gumiho
        # drafter. The drafter's model class raises it when a Gumiho drafter is loaded.
        logger.warning("%s", e)
        return
    from .proposer import install

    install()
