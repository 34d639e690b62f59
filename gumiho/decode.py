"""One decode loop for vanilla and speculative decoding, as a stream of StepEvents.

    run    = start(target, prompt, proposer, settings)   every check, before anything runs
    prefill(run)                  -> KV cache, the target's states, first token      (step 0)
    repeat:
        tree        = draft(run, root)          the proposer's tree below the last token
        out = verify(run, tree)                 one target forward over the whole tree
        acc         = accept(run, tree, logits) the accepted path and the bonus token
        tokens      = commit(run, tree, acc, states)
                      the cache keeps the root and the accepted path; the proposer
                      takes the accepted positions' real states (a fused drafter's:
                      the states of its layers, from the same forward)
        emit(...)   -> the path's tokens and the bonus, cut where vanilla would stop (step 1, 2, ...)

The loop knows drafting only through the proposer interface (gumiho.proposers).
With no drafter (the Vanilla proposer) the tree is the root alone and this is plain
token-by-token decoding with a KV cache: the reference the speculative output is
compared with.
"""
from __future__ import annotations

import math
import operator
import threading
import time
from dataclasses import dataclass, field, fields, replace
from typing import Iterator, Optional, Union

import torch

from .errors import GumihoError
from .events import EmittedToken, RejectedToken, StepEvent
from .heads import HeadFamily
from .metrics import GenerationStats, summarize
from .proposers import Budget, Proposer, ProposerSession, Verified, as_proposer
from .rules import EXACT, SAMPLING_RULES, check_rule
from .runtimes.base import Forward
from .target import Target
from .tree import DraftTree, TreeSettings
from .verify import Acceptance, accept_greedy, accept_sampling, process_logits, sample_token
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


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    prompt_tokens: int
    steps: list[StepEvent] = field(default_factory=list)
    stats: Optional[GenerationStats] = None
    finish_reason: Optional[str] = None


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
    acceptance_rule: str = EXACT  # the sampling rule by name (gumiho.rules); greedy takes only "exact"

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
          acceptance_rule: str = EXACT) -> Run:
    """Every check of a generation, before any forward: settings, the prompt's ids
    against the target's vocabulary and context window, the drafter, the acceptance
    rule (a name from gumiho.rules.SAMPLING_RULES: "exact", the engine's, unless an
    experiment wants a wrong one; see :func:`stream`)."""
    proposer = as_proposer(drafter)
    target.runtime.check_proposer(proposer)  # a drafter the runtime cannot feed is refused in words
    settings = check_settings(settings).validate()
    check_rule(acceptance_rule)
    if acceptance_rule != EXACT and settings.temperature == 0:
        # Refused rather than ignored: a caller who asked for a rule believes it ran.
        raise GumihoError(f"The acceptance rule {acceptance_rule!r} is a sampling rule: it needs a temperature "
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
               acceptance_rule=acceptance_rule)


def choose(run: Run, logits_row: torch.Tensor) -> int:
    """The target's next token from one row of logits: argmax, or a sample."""
    if run.greedy:
        return int(logits_row.argmax())
    s = run.settings
    return sample_token(process_logits(logits_row, s.temperature, s.top_p, s.top_k).cpu(), run.gen)


def cut(run: Run, tokens: list[int]) -> tuple[list[int], Optional[str]]:
    """``tokens`` cut exactly where vanilla decoding would stop, and why it stops
    (None: it goes on)."""
    n_prompt, ctx, limit = len(run.prompt_ids), run.target.context_length, run.settings.max_new_tokens
    eos = run.target.eos_ids
    out, reason = [], None
    for tok in tokens:
        if run.produced + len(out) >= limit:
            reason = "length"
            break
        if n_prompt + run.produced + len(out) >= ctx:
            reason = "context"
            break
        out.append(tok)
        if tok in eos:
            reason = "eos"
            break
    if reason is None:
        if run.produced + len(out) >= limit:
            reason = "length"
        elif n_prompt + run.produced + len(out) >= ctx:
            reason = "context"
    return out, reason


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(run: Run) -> float:
    """Seconds on the generation's clock, after the device has finished its work."""
    _sync(run.target.device)
    return time.perf_counter()


def prefill(run: Run) -> StepEvent:
    """The prompt through the target: the cache, the first token (step 0), and the
    proposer's session started on the prompt's states."""
    run.t0 = time.perf_counter()
    run.session = run.proposer.start(run.prompt_ids)
    run.cache = run.target.new_cache()
    out = run.target.forward(run.prompt_ids, 0, run.cache, last_logits_only=True,
                             feature_layers=run.proposer.feature_layers)
    return first_token(run, out)


def first_token(run: Run, out: Forward) -> StepEvent:
    """Step 0 from the prompt's forward ``out``: the first token, and the proposer's
    session fed the prompt's states."""
    first = choose(run, out.logits[-1])
    toks, reason = cut(run, [first])
    t1 = clock(run)
    run.produced += len(toks)
    if reason is None:
        run.session.update(Verified(tokens=[first], states=out.drafter_states))
    return StepEvent(step=0, emitted=[EmittedToken(first, 0, HeadFamily.TARGET, None)], accepted_length=0, rejected=[],
                     drafted=0, draft_s=0.0, verify_s=t1 - run.t0, elapsed_s=t1 - run.t0, target_choices=[first],
                     finished=reason is not None, finish_reason=reason)


def draft(run: Run, root: int) -> DraftTree:
    """The proposer's tree below ``root``, within the settings' budget and the room
    the context window leaves. The tree records the head that proposed each node
    (the events and everything downstream read it there)."""
    return run.session.propose(root, Budget(run.tree_settings, max_depth=run.room, verify_cost=run.verify_cost))


def verify(run: Run, tree: DraftTree) -> Forward:
    """One target forward over the whole tree after the cache: the states the
    proposer reads and the logits, one row per node."""
    parents = None if len(tree) == 1 else tree.parents  # the root alone is a one-token chain
    return run.target.forward(tree.tokens, run.past, run.cache, parents,
                              feature_layers=run.proposer.feature_layers)


def accept(run: Run, tree: DraftTree, logits: torch.Tensor, children: list[list[int]]) -> Acceptance:
    """The accepted path and the bonus token (gumiho.verify has both rules)."""
    if run.greedy:
        return accept_greedy(tree, logits, children=children)
    s = run.settings
    probs = process_logits(logits, s.temperature, s.top_p, s.top_k).cpu()
    # The exact rule through this module's own name for it, so that a test swapping a
    # rule in there reaches the loop as before; any other by its name in gumiho.rules.
    rule = accept_sampling if run.acceptance_rule == EXACT else SAMPLING_RULES[run.acceptance_rule]
    return rule(tree, probs, run.gen, children=children)


def commit(run: Run, tree: DraftTree, acc: Acceptance, states: torch.Tensor) -> list[int]:
    """Keep the root's and the accepted path's cache entries, hand the proposer
    their states, and return the step's new tokens (the path's, then the bonus)."""
    kept = [0] + acc.path
    if len(tree) > 1:
        run.target.keep(run.cache, run.past, kept)
    new_tokens = [tree.tokens[i] for i in acc.path] + [acc.bonus]
    run.session.update(Verified(tokens=new_tokens, states=states[kept], tree=tree, accepted=acc.path))
    return new_tokens


def emit(run: Run, step: int, tree: DraftTree, acc: Acceptance, new_tokens: list[int], children,
         times: tuple[float, float, float], keep_trees: bool) -> StepEvent:
    """The step's event: its tokens cut where vanilla would stop, each with the head
    that proposed it, and the rejected candidates where acceptance stopped."""
    ts, td, tv = times
    heads = tree.heads
    toks, reason = cut(run, new_tokens)
    emitted = [EmittedToken(tok, tree.depths[acc.path[k]], heads[acc.path[k]], tree.probs[acc.path[k]])
               if k < len(acc.path) else EmittedToken(tok, 0, HeadFamily.TARGET, None) for k, tok in enumerate(toks)]
    stop_node = acc.path[-1] if acc.path else 0
    rejected = [RejectedToken(tree.tokens[c], tree.depths[c], heads[c], tree.probs[c])
                for c in children[stop_node]]
    run.produced += len(toks)
    # What the statistics count is what was written: a cut keeps the first `written` drafts.
    written = min(len(acc.path), len(toks))
    path = acc.path[:written]
    return StepEvent(step=step, emitted=emitted, accepted_length=written, rejected=rejected,
                     drafted=len(tree) - 1, copy_nodes=sum(tree.copied), draft_s=td - ts, verify_s=tv - td,
                     copied_positions=[k + 1 for k, node in enumerate(path) if tree.copied[node]],
                     elapsed_s=tv - run.t0, tree=tree if keep_trees else None, accepted_nodes=path,
                     cut_nodes=acc.path[written:], target_choices=acc.target_choices, finished=reason is not None,
                     finish_reason=reason, checks=acc.checks, residual=acc.residual)


def stopped(run: Run, step: int) -> StepEvent:
    return StepEvent(step=step, emitted=[], accepted_length=0, rejected=[], drafted=0, draft_s=0.0, verify_s=0.0,
                     elapsed_s=time.perf_counter() - run.t0, finished=True, finish_reason="stopped")


def stream(target: Target, prompt_ids: list[int], drafter=None, settings: Optional[GenerationSettings] = None,
           stop: Optional[threading.Event] = None, keep_trees: bool = False,
           acceptance_rule: str = EXACT) -> Iterator[StepEvent]:
    """Decode ``prompt_ids`` with ``target`` (speculatively when ``drafter`` is given:
    a drafter from load_drafter, ``with_copy(...)``, or any gumiho.proposers.Proposer),
    yielding one StepEvent per target forward. ``stop`` ends the stream early.

    ``acceptance_rule``: the sampling rule by name (gumiho.rules). "exact", the
    default, is the engine's rule, which keeps the output the target's; the others
    are wrong on purpose, for the losslessness experiment (gumiho.lossless). A rule
    other than "exact" needs a temperature above 0: greedy decoding refuses it in
    words. An unknown name is refused with the list of names."""
    run = start(target, prompt_ids, drafter, settings, acceptance_rule)
    with torch.inference_mode():
        event = prefill(run)
        yield event
        yield from decode_steps(run, event, stop, keep_trees)


def decode_steps(run: Run, event: StepEvent, stop: Optional[threading.Event] = None,
                 keep_trees: bool = False) -> Iterator[StepEvent]:
    """The verify steps after step 0 (``event``), until the generation finishes."""
    with torch.inference_mode():
        root, step = event.tokens[-1], 0
        while not event.finished:
            if stop is not None and stop.is_set():
                yield stopped(run, step + 1)
                return
            step += 1
            ts = time.perf_counter()
            tree = draft(run, root)
            td = clock(run)
            out = verify(run, tree)
            children = tree.children()
            acc = accept(run, tree, out.logits, children)
            new_tokens = commit(run, tree, acc, out.drafter_states)
            tv = clock(run)
            event = emit(run, step, tree, acc, new_tokens, children, (ts, td, tv), keep_trees)
            yield event
            root = new_tokens[-1]


class SharedPrompt:
    """Many short generations of one prompt, with one prefill.

    Sampling the same prompt again and again (gumiho.lossless draws hundreds of
    two-token continuations) repeats the same prefill each time, and the prefill is
    most of a short generation's work: its forward over the prompt gives the same
    cache, the same logits and the same states every time. Here the prompt runs
    through the target once; each :meth:`stream` cuts the cache back to the prompt
    (Runtime.truncate), starts a fresh proposer session on the kept states and a
    generator on its own seed, and goes on exactly as :func:`stream` would: same
    checks (made once, here), same first-token draw, same loop: for the same seed,
    the same tokens as :func:`stream` (the tests check it on the torch and the
    llama.cpp runtimes).

    A runtime that cannot truncate its cache (Runtime.truncates False) prefills
    again for each generation. The prefill's step event reports the time of the
    first token only (the shared forward was paid once, up front). One cache serves
    every generation, so one generation at a time: each :meth:`stream` starts by
    cutting the cache, abandoning the one before."""

    def __init__(self, target: Target, prompt_ids, drafter=None, settings: Optional[GenerationSettings] = None,
                 acceptance_rule: str = EXACT):
        self.run = start(target, prompt_ids, drafter, settings, acceptance_rule)
        self.shared = target.runtime.truncates
        self.out: Optional[Forward] = None
        self.cache = None
        if self.shared:
            with torch.inference_mode():
                self.cache = target.new_cache()
                self.out = target.forward(self.run.prompt_ids, 0, self.cache, last_logits_only=True,
                                          feature_layers=self.run.proposer.feature_layers)

    def stream(self, seed: Optional[int] = None, stop: Optional[threading.Event] = None,
               keep_trees: bool = False) -> Iterator[StepEvent]:
        """One generation of the prompt, with ``seed`` for its sampling (as
        GenerationSettings.seed; ignored when greedy), as :func:`stream` yields it."""
        base = self.run
        settings = replace(base.settings, seed=seed)
        settings.validate()
        gen = None
        if not base.greedy:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(seed if seed is not None else torch.seed())
        run = replace(base, settings=settings, gen=gen, session=None, cache=None, produced=0, t0=0.0)
        with torch.inference_mode():
            if not self.shared:
                event = prefill(run)
            else:
                run.target.runtime.truncate(self.cache, len(run.prompt_ids))
                run.cache = self.cache
                run.t0 = time.perf_counter()
                run.session = run.proposer.start(run.prompt_ids)
                event = first_token(run, self.out)
            yield event
            yield from decode_steps(run, event, stop, keep_trees)


def generate(target: Target, prompt: Union[str, list, None] = None, drafter=None,
             settings: Optional[GenerationSettings] = None, prompt_ids: Optional[list[int]] = None,
             acceptance_rule: str = EXACT, **overrides) -> GenerationResult:
    """Generate a whole answer. ``prompt`` (text or chat messages) goes through the
    target's chat template; ``prompt_ids`` bypasses it. Keyword overrides set
    GenerationSettings fields (max_new_tokens=..., temperature=..., tree=...) on a
    copy: the caller's ``settings`` stays as it was passed. ``acceptance_rule``: as
    for :func:`stream`."""
    settings = check_settings(settings)
    known = {f.name for f in fields(GenerationSettings)}
    for k in overrides:
        if k not in known:
            raise GumihoError(f"Unknown generation setting {k!r}.")
    settings = replace(settings, **overrides)
    ids = check_prompt_ids(prompt_ids, target) if prompt_ids is not None else target.encode(prompt)
    steps = list(stream(target, ids, drafter, settings, acceptance_rule=acceptance_rule))
    tokens = [t for s in steps for t in s.tokens]
    text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    return GenerationResult(text=text, tokens=tokens, prompt_tokens=len(ids), steps=steps,
                            stats=summarize(steps, draft_depth(drafter)),
                            finish_reason=steps[-1].finish_reason if steps else None)
