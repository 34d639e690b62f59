"""What every target runtime does, and nothing else: the seam between the decode loop
and the kernels that run the target's forwards.

A runtime holds the target's weights in its own form and runs forwards over them:

    cache  = runtime.new_cache()                       an empty KV cache of one generation
    out = runtime.forward(tokens, past, cache, parents)
                                                       the tokens after ``past`` cached ones: a
                                                       chain (parents None) or a draft tree;
                                                       out.states, out.logits (a Forward)
    runtime.keep(cache, past, kept)                    the cache keeps the root and the accepted
                                                       path of the last forward, as a one-token
                                                       decoder would have built it
    runtime.check_proposer(proposer)                   a drafter it cannot feed is refused in words
    runtime.default_tree(device)                       the draft tree its cost curve wants

The decode loop, the bench and the app talk to a target only through this; which
runtime it is shows only in ``name`` and ``weights`` (words for people), and in the
capabilities below. Two implementations: gumiho.runtimes.pytorch (the transformers
model, float32 on a CPU) and gumiho.runtimes.llamacpp (the GGUF file's packed 4-bit
blocks in llama.cpp).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple, Optional

import torch


class Forward(NamedTuple):
    """What a target forward gives back.

    ``states``: the final-norm states [T, H], what the LM head reads (None where the
    runtime hands out inner layers only); ``logits``: [T, V], or [1, V] for the last
    row; ``layer_states``: the inner layers a fused drafter asked for
    (``feature_layers``), concatenated [T, k*H], else None."""

    states: Optional[torch.Tensor]
    logits: torch.Tensor
    layer_states: Optional[torch.Tensor] = None

    @property
    def drafter_states(self) -> torch.Tensor:
        """What the proposer is conditioned on: the inner layers it asked for, else the final states."""
        return self.layer_states if self.layer_states is not None else self.states


class Runtime(ABC):
    """How a target's forwards run. Subclasses set the class attributes."""

    name: str = ""  # what ran the forwards, for people and records: "torch", "llama.cpp"
    weights: str = ""  # the weights it multiplies, in words: "float32", "4-bit (Q4_1, as stored)"
    # Whether a forward over a few tokens costs about one one-token forward (float32 on a
    # CPU, any GPU). Where it does not, every drafted token costs time on its own, and
    # drafting pays only if the drafter is nearly always right.
    flat_verify: bool = True
    # Whether it multiplies quantized weights (GGUF's 4-bit layouts): a one-token forward is
    # then cheap beside the drafter's step, so a drafter next to it drafts through 4-bit
    # copies of its own weights too (gumiho.kernels.int4linear, where the CPU takes them).
    quantized: bool = False
    # Whether :meth:`truncate` can cut a cache back to a prefix (one prefill then serves
    # many short generations of the same prompt: gumiho.engine.decode.SharedPrompt).
    truncates: bool = False

    @abstractmethod
    def new_cache(self):
        """An empty KV cache for one generation's forwards."""

    @abstractmethod
    def forward(self, tokens: list[int], past: int, cache, parents: Optional[list[int]] = None,
                last_logits_only: bool = False, feature_layers: Optional[tuple] = None
                ) -> Forward:
        """One forward over ``tokens`` placed after the ``past`` tokens ``cache`` holds.
        ``parents`` None: a chain (token i at position past + i, each sees those before
        it). Otherwise a draft tree in parents-first order (-1 for the root): node i sits
        at past + its depth and sees the context, its ancestors and itself.

        Returns a :class:`Forward`: the final-norm states [T, H] (what the LM head
        reads and a drafter is conditioned on) and the logits [T, V], or with
        ``last_logits_only`` the last row's [1, V]. With ``feature_layers`` (a fused
        drafter's, in transformers' ``hidden_states`` numbering) also those layers'
        states concatenated [T, k*H] (``layer_states``); a runtime that cannot hand
        them out refuses the drafter in :meth:`check_proposer` before any forward."""

    @abstractmethod
    def keep(self, cache, past: int, kept: list[int]) -> None:
        """After a forward of a tree from ``past``: keep the nodes ``kept`` (the root and
        the accepted path, by index, in path order), drop every other node's entries."""

    def truncate(self, cache, length: int) -> None:
        """Cut ``cache`` back to its first ``length`` positions, as if nothing after them
        had ever been decoded. Only where :attr:`truncates` says so."""
        raise NotImplementedError(f"The {self.name or type(self).__name__} runtime cannot truncate a cache.")

    def check_proposer(self, proposer) -> None:
        """Raise GumihoError, with the fix in words, when this runtime cannot give the
        proposer what it reads. The default: it can."""

    def default_tree(self, device) -> "object":
        """The TreeSettings this runtime's cost curve wants (see gumiho.tree)."""
        from ..tree import TreeSettings

        return TreeSettings.for_device(device)

    def describe(self) -> str:
        """One line for logs and records."""
        return f"{self.name} ({self.weights})"


def tree_depths(parents: list[int]) -> list[int]:
    """Each node's depth (the root 0), for parents in parents-first order."""
    depths = [0] * len(parents)
    for i, p in enumerate(parents):
        if p >= 0:
            depths[i] = depths[p] + 1
    return depths
