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

The settings and every check made before the first forward are gumiho.engine.run's;
verify, accept and commit are gumiho.engine.verify's; this module strings the steps
together. The loop knows drafting only through the proposer interface
(gumiho.proposers), and the sampling rule only as a callable it is handed
(gumiho.engine.acceptance.SamplingRule).
With no drafter (the Vanilla proposer) the tree is the root alone and this is plain
token-by-token decoding with a KV cache: the reference the speculative output is
compared with.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields, replace
from typing import Iterator, Optional, Union

import torch

from ..errors import GumihoError
from ..heads import HeadFamily
from ..proposers import Budget, Verified
from ..runtimes.base import Forward
from ..tree import DraftTree
from .acceptance import Acceptance, SamplingRule, accept_sampling, process_logits, sample_token
from .events import EmittedToken, RejectedToken, StepEvent
from .metrics import GenerationStats, summarize
from .run import GenerationSettings, Run, check_prompt_ids, check_settings, draft_depth, start
from .target import Target
from .verify import accept, commit, verify


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    prompt_tokens: int
    steps: list[StepEvent] = field(default_factory=list)
    stats: Optional[GenerationStats] = None
    finish_reason: Optional[str] = None


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
           acceptance_rule: SamplingRule = accept_sampling, records: bool = False) -> Iterator[StepEvent]:
    """Decode ``prompt_ids`` with ``target`` (speculatively when ``drafter`` is given:
    a drafter from load_drafter, ``with_copy(...)``, or any gumiho.proposers.Proposer),
    yielding one StepEvent per target forward. ``stop`` ends the stream early.

    ``acceptance_rule``: the sampling rule, a callable the loop calls as
    gumiho.engine.acceptance.SamplingRule says. The default, accept_sampling, is the
    engine's rule, which keeps the output the target's; an experiment may hand it
    another, one wrong on purpose to see the losslessness test catch it. Another needs a
    temperature above 0: greedy decoding refuses it in words.

    ``records``: each verify step's StepEvent.checks and StepEvent.residual say how the
    rule decided (the walkthrough and the lab ask). Off, they stay empty, the tokens
    are the same, and the step reads the device once."""
    run = start(target, prompt_ids, drafter, settings, acceptance_rule, records)
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

    Sampling the same prompt again and again (the losslessness experiment draws hundreds of
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
                 acceptance_rule: SamplingRule = accept_sampling, records: bool = False):
        self.run = start(target, prompt_ids, drafter, settings, acceptance_rule, records)
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
             acceptance_rule: SamplingRule = accept_sampling, records: bool = False,
             **overrides) -> GenerationResult:
    """Generate a whole answer. ``prompt`` (text or chat messages) goes through the
    target's chat template; ``prompt_ids`` bypasses it. Keyword overrides set
    GenerationSettings fields (max_new_tokens=..., temperature=..., tree=...) on a
    copy: the caller's ``settings`` stays as it was passed. ``acceptance_rule`` and
    ``records``: as for :func:`stream`."""
    settings = check_settings(settings)
    known = {f.name for f in fields(GenerationSettings)}
    for k in overrides:
        if k not in known:
            raise GumihoError(f"Unknown generation setting {k!r}.")
    settings = replace(settings, **overrides)
    ids = check_prompt_ids(prompt_ids, target) if prompt_ids is not None else target.encode(prompt)
    steps = list(stream(target, ids, drafter, settings, acceptance_rule=acceptance_rule, records=records))
    tokens = [t for s in steps for t in s.tokens]
    text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    return GenerationResult(text=text, tokens=tokens, prompt_tokens=len(ids), steps=steps,
                            stats=summarize(steps, draft_depth(drafter)),
                            finish_reason=steps[-1].finish_reason if steps else None)
