"""One generation's settings, checked before anything runs, and its state as it goes.

:func:`start` makes every check of a generation (settings, the prompt's ids against
the target's vocabulary and context window, the drafter, the acceptance rule) and
returns the :class:`Run` the decode loop (gumiho.engine.decode) carries from step to
step.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import GumihoError
from ..proposers import Proposer, ProposerSession, as_proposer
from ..tree import TreeSettings
from .acceptance import SamplingRule, accept_sampling
from .target import Target
from .verifycost import VerifyCost, tokens_needed, verify_cost_for

MAX_NEW_TOKENS_LIMIT = 1_000_000
MAX_SEED = 2**64 - 1  # what torch.Generator.manual_seed takes


@dataclass(slots=True)  # an unknown setting raises (as TreeSettings)
class GenerationSettings:
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    tree: Optional[TreeSettings] = None  # None: sized for the device

    def validate(self) -> "GenerationSettings":
        m = self.max_new_tokens
        if isinstance(m, bool) or not isinstance(m, int) or m <= 0:
            raise GumihoError(f"max_new_tokens must be a whole number >= 1, got {m!r}.")
        if m > MAX_NEW_TOKENS_LIMIT:
            raise GumihoError(f"max_new_tokens={m} is too large; use at most {MAX_NEW_TOKENS_LIMIT}.")
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or math.isnan(t) or t < 0 or t > 100:
            raise GumihoError(f"temperature must be a number between 0 and 100 (0 = greedy), got {t!r}.")
        p = self.top_p
        if not isinstance(p, (int, float)) or isinstance(p, bool) or math.isnan(p) or not (0 < p <= 1):
            raise GumihoError(f"top_p must be a number in (0, 1], got {p!r}.")
        k = self.top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise GumihoError(f"top_k must be a whole number >= 0 (0 = off), got {k!r}.")
        sd = self.seed
        if sd is not None and (isinstance(sd, bool) or not isinstance(sd, int) or not 0 <= sd <= MAX_SEED):
            raise GumihoError(f"seed must be a whole number from 0 to 2**64 - 1, or None for a random one; "
                              f"got {repr(sd)[:40]}.")
        if self.tree is not None:
            if not isinstance(self.tree, TreeSettings):
                raise GumihoError(f"tree must be a TreeSettings, e.g. TreeSettings(total_tokens=5, depth=3) (for a "
                                  f"dict d: TreeSettings(**d)), or None for the device's; "
                                  f"got {type(self.tree).__name__}.")
            self.tree.validate()
        return self

    def tree_on(self, target: Target) -> TreeSettings:
        """The tree a generation on ``target`` drafts: these settings' own, or (None)
        the one its runtime wants (TreeSettings.for_target). The one place that
        choice is made: the decode loop asks it, and so does a caller that must
        know the depth that ran (the app's legend)."""
        return self.tree or TreeSettings.for_target(target)


def check_settings(settings) -> GenerationSettings:
    if settings is None:
        return GenerationSettings()
    if not isinstance(settings, GenerationSettings):
        raise GumihoError(f"settings must be a GenerationSettings, e.g. GenerationSettings(max_new_tokens=64) (for a "
                          f"dict d: GenerationSettings(**d)), or None; got {type(settings).__name__}.")
    return settings


def check_prompt_ids(prompt_ids, target: Target) -> list[int]:
    """Token ids the target's embedding has rows for: an id outside them fails as a
    raw IndexError deep inside the model's forward."""
    if isinstance(prompt_ids, (str, bytes)) or not hasattr(prompt_ids, "__iter__"):
        raise GumihoError(f"prompt_ids must be a list of token ids (whole numbers), got {type(prompt_ids).__name__}; "
                          f"turn text into ids with target.encode(text).")
    ids = []
    vocab = target.model.get_input_embeddings().num_embeddings
    for i, t in enumerate(prompt_ids):
        try:
            if isinstance(t, bool) or isinstance(t, float):
                raise TypeError
            t = operator.index(t)
        except TypeError:
            raise GumihoError(f"prompt_ids[{i}] is {repr(t)[:40]}, not a token id (a whole number); turn text into "
                              f"ids with target.encode(text).") from None
        if not 0 <= t < vocab:
            raise GumihoError(f"prompt_ids[{i}] = {t} is not a token id of {target.name}: its ids run from 0 to "
                              f"{vocab - 1}. Use ids from this target's tokenizer (target.encode(text)).")
        ids.append(t)
    return ids


def draft_depth(drafter) -> int:
    """The deepest draft position ``drafter`` (anything :func:`generate` takes as one)
    can propose: 0 for vanilla."""
    return as_proposer(drafter).max_depth


@dataclass
class Run:
    """One generation: what was checked before it started, and its state as it goes."""

    target: Target
    proposer: Proposer
    settings: GenerationSettings
    tree_settings: TreeSettings
    prompt_ids: list[int]
    verify_cost: Optional[VerifyCost]  # a cost-aware tree's, measured before the clock starts
    gen: Optional[torch.Generator]  # None: greedy
    session: Optional[ProposerSession] = None
    cache: object = None
    produced: int = 0  # tokens emitted so far
    t0: float = 0.0
    # The sampling rule the loop calls (gumiho.engine.acceptance.SamplingRule); greedy has its own.
    acceptance_rule: SamplingRule = accept_sampling
    records: bool = False  # fill each step's NodeCheck / Residual records (the walkthrough and the lab ask)

    @property
    def greedy(self) -> bool:
        return self.gen is None

    @property
    def past(self) -> int:
        """The cache's length: every token so far except the last one emitted."""
        return len(self.prompt_ids) + self.produced - 1

    @property
    def room(self) -> int:
        """The deepest draft node the context window leaves room for (node at depth
        d sits at past + d)."""
        return self.target.context_length - self.past - 1


def start(target: Target, prompt_ids, drafter=None, settings: Optional[GenerationSettings] = None,
          acceptance_rule: SamplingRule = accept_sampling, records: bool = False) -> Run:
    """Every check of a generation, before any forward: settings, the prompt's ids
    against the target's vocabulary and context window, the drafter, the acceptance
    rule (a callable: accept_sampling, the engine's, unless an experiment hands
    another; see gumiho.engine.decode.stream), and whether to record the checks."""
    proposer = as_proposer(drafter)
    target.runtime.check_proposer(proposer)  # a drafter the runtime cannot feed is refused in words
    settings = check_settings(settings).validate()
    if not callable(acceptance_rule):
        raise GumihoError(f"acceptance_rule must be a function rule(tree, probs, generator, children=..., "
                          f"records=...) -> Acceptance, such as gumiho.engine.acceptance.accept_sampling (the "
                          f"engine's); got {repr(acceptance_rule)[:40]}.")
    if acceptance_rule is not accept_sampling and settings.temperature == 0:
        # Refused rather than ignored: a caller who asked for a rule believes it ran.
        name = getattr(acceptance_rule, "__name__", "given")
        raise GumihoError(f"The acceptance rule {name!r} is a sampling rule: it needs a temperature "
                          f"above 0. Greedy decoding (temperature 0) keeps a draft exactly when it is the "
                          f"target's own choice, and has no other rule.")
    tree_settings = settings.tree_on(target).validate()
    ctx = target.context_length
    prompt_ids = check_prompt_ids(prompt_ids, target)
    if not prompt_ids:
        raise GumihoError("The prompt is empty: type some text to start from.")
    if len(prompt_ids) >= ctx:
        raise GumihoError(
            f"The prompt is {len(prompt_ids)} tokens long but {target.name} reads at most {ctx} tokens "
            f"(including the answer); shorten the prompt."
        )
    gen = None
    if settings.temperature != 0:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(settings.seed if settings.seed is not None else torch.seed())
    verify_cost = None
    if proposer.sizes_by_cost and tree_settings.cost_aware:
        # Measured once per target, before the clock starts: it is not this generation's work.
        verify_cost = verify_cost_for(target, tokens_needed(tree_settings))
    return Run(target, proposer, settings, tree_settings, prompt_ids, verify_cost, gen,
               acceptance_rule=acceptance_rule, records=bool(records))

