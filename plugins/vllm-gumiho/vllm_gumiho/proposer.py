"""The proposer: vLLM's EAGLE proposer, with the Gumiho drafter's MLP heads after its
second step.

``GumihoProposer`` subclasses vLLM's ``EagleProposer`` and takes its place in the model
runner's module (``install``), so the runner builds it for every EAGLE-family method.
For a drafter that is not a Gumiho export it changes nothing: ``propose`` is vLLM's.
For a Gumiho drafter and k draft tokens:

1. vLLM's own ``propose`` runs with ``num_speculative_tokens = min(k, 2)``: the first
   pass over the verified tokens (the drafter's KV cache over the context, and draft
   position 1 from the last verified position) and, for k >= 2, one EAGLE step for
   position 2. That is the serial Transformer, step by step.
2. For k > 2 the drafter model still holds what its last forward (the step for
   position 2) computed: its input u and output s'. The heads' input is
   ``cat(u, fc(cat(embed(t_2), s')))``, and the first k - 2 heads run at once on it;
   each head's argmax over the draft vocabulary is positions 3..k.

Drafts are greedy (see vllm_gumiho).
"""
from __future__ import annotations

import torch

from . import ARCHITECTURE, GumihoPluginError

_installed = False


def is_gumiho_drafter(vllm_config) -> bool:
    speculative = vllm_config.speculative_config
    if speculative is None or speculative.draft_model_config is None:
        return False
    names = list(getattr(speculative.draft_model_config.hf_config, "architectures", None) or [])
    names += list(getattr(speculative.draft_model_config, "architectures", None) or [])
    return ARCHITECTURE in names


def install() -> None:
    """Put GumihoProposer where the model runner looks up ``EagleProposer``."""
    global _installed
    if _installed:
        return
    from vllm.v1.worker import gpu_model_runner

    base = gpu_model_runner.EagleProposer
    gpu_model_runner.EagleProposer = _make_class(base)
    _installed = True


def _make_class(base):
    class GumihoProposer(base):
        """vLLM's EAGLE proposer; for a Gumiho drafter, MLP heads after step 2."""

        def __init__(self, vllm_config, device, runner=None):
            super().__init__(vllm_config, device, runner)
            self.gumiho = is_gumiho_drafter(vllm_config)
            if not self.gumiho:
                return
            from .model import SERIAL_POSITIONS, check_draft_length

            speculative = vllm_config.speculative_config
            check_draft_length(speculative.draft_model_config.hf_config, speculative.num_speculative_tokens)
            if speculative.draft_sample_method != "greedy":
                raise GumihoPluginError(
                    f"The Gumiho drafter drafts greedily (the argmax at every position, as its MLP heads are "
                    f"trained to); draft_sample_method {speculative.draft_sample_method!r} is not supported. Leave "
                    f"it at 'greedy' (vLLM's default): requests can still sample at any temperature.")
            if self.use_local_argmax_reduction or self.use_heterogeneous_vocab or self.parallel_drafting:
                raise GumihoPluginError(
                    "The Gumiho drafter carries its own draft vocabulary and drafts positions 1-2 serially: "
                    "use_local_argmax_reduction, use_heterogeneous_vocab and parallel_drafting are not supported "
                    "with it.")
            self.serial_positions = SERIAL_POSITIONS

        def _greedy_sample(self, hidden_states: torch.Tensor) -> torch.Tensor:
            if not self.gumiho:
                return super()._greedy_sample(hidden_states)
            return self.model.draft_argmax(hidden_states)

        def propose(self, num_speculative_tokens, *args, **kwargs):
            if not self.gumiho or num_speculative_tokens <= self.serial_positions:
                return super().propose(num_speculative_tokens, *args, **kwargs)
            serial = super().propose(self.serial_positions, *args, **kwargs)  # [batch, 2]
            self.num_speculative_tokens = num_speculative_tokens  # super() set it to the serial count
            batch = serial.shape[0]
            drafter = self.model.model
            u = drafter.last_input[:batch]  # the step for position 2: its input and output
            s = drafter.last_output[:batch]
            u_next = drafter.project(serial[:, -1].to(torch.int32), s)
            heads = drafter.run_heads(torch.cat((u, u_next), dim=-1), num_speculative_tokens - self.serial_positions)
            later = self.model.draft_argmax(heads.reshape(-1, heads.shape[-1])).view(batch, -1)
            return torch.cat((serial, later.to(serial.dtype)), dim=1)

    GumihoProposer.__qualname__ = GumihoProposer.__name__ = "GumihoProposer"
    return GumihoProposer
