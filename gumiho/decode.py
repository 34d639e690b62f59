"""One decode loop for vanilla and speculative decoding, as a stream of StepEvents.

    prefill(prompt)                  -> cache, hidden states, first token     (step 0)
    repeat:
        tree   = drafter proposes below the last token  (vanilla: the root alone)
        logits = target forward over the whole tree, one pass
        path, bonus = accept(tree, logits)
        cache keeps the root and the accepted path
        drafter context grows by the accepted positions' real hidden states
            (a fused drafter's: the states of its layers, from the same forward)
        emit path tokens + bonus                                     (step 1, 2, ...)

With no drafter the tree is the root alone and this is plain token-by-token
decoding with a KV cache: the reference the speculative output is compared with.
"""
from __future__ import annotations

import math
import operator
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import torch

from .copying import CopyProposer, split_copy
from .errors import GumihoError
from .events import EmittedToken, RejectedToken, StepEvent
from .kvcache import keep_tree_entries, new_cache
from .metrics import GenerationStats, summarize
from .models import Target
from .tree import DraftTree, TreeSettings, verify_inputs
from .verifycost import tokens_needed, verify_cost_for
from .verify import accept_greedy, accept_sampling, process_logits, sample_token

MAX_NEW_TOKENS_LIMIT = 1_000_000
MAX_SEED = 2**64 - 1  # what torch.Generator.manual_seed takes


@dataclass
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
    """The deepest draft position ``drafter`` can propose (0 for vanilla): the
    learned drafter's depth, or the copy proposer's longest guess if that is deeper."""
    base, copy = split_copy(drafter)
    return max(base.cfg.max_depth if base is not None else 0, copy.max_tokens if copy is not None else 0)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stream(target: Target, prompt_ids: list[int], drafter=None, settings: Optional[GenerationSettings] = None,
           stop: Optional[threading.Event] = None, keep_trees: bool = False) -> Iterator[StepEvent]:
    """Decode ``prompt_ids`` with ``target`` (speculatively when ``drafter`` is given),
    yielding one StepEvent per target forward. ``stop`` ends the stream early.
    ``drafter`` may carry the copy proposer (gumiho.copying.with_copy): its guess,
    copied from the context, joins every step's tree."""
    drafter, copy = split_copy(drafter)
    settings = check_settings(settings).validate()
    tree_settings = (settings.tree or TreeSettings.for_device(target.device)).validate()
    ctx = target.context_length
    prompt_ids = check_prompt_ids(prompt_ids, target)
    n_prompt = len(prompt_ids)
    if n_prompt == 0:
        raise GumihoError("The prompt is empty: type some text to start from.")
    if n_prompt >= ctx:
        raise GumihoError(
            f"The prompt is {n_prompt} tokens long but {target.name} reads at most {ctx} tokens "
            f"(including the answer); shorten the prompt."
        )
    greedy = settings.temperature == 0
    gen = None
    if not greedy:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(settings.seed if settings.seed is not None else torch.seed())
    eos = target.eos_ids
    dev = target.device

    def choose(logits_row):
        if greedy:
            return int(logits_row.argmax())
        return sample_token(process_logits(logits_row, settings.temperature, settings.top_p, settings.top_k).cpu(), gen)

    def cut(tokens):
        """Emitted tokens cut exactly where vanilla decoding would stop."""
        out, reason = [], None
        for tok in tokens:
            if produced + len(out) >= settings.max_new_tokens:
                reason = "length"
                break
            if n_prompt + produced + len(out) >= ctx:
                reason = "context"
                break
            out.append(tok)
            if tok in eos:
                reason = "eos"
                break
        if reason is None:
            if produced + len(out) >= settings.max_new_tokens:
                reason = "length"
            elif n_prompt + produced + len(out) >= ctx:
                reason = "context"
        return out, reason

    copier = None
    if copy is not None:
        # The context so far (prompt, then every emitted token), indexed as it grows.
        copier = CopyProposer(copy, prompt_ids)
    verify_cost = None
    if drafter is not None and tree_settings.cost_aware:
        # Measured once per target, before the clock starts: it is not this generation's work.
        verify_cost = verify_cost_for(target, tokens_needed(tree_settings))
    t0 = time.perf_counter()
    session = drafter.new_session() if drafter is not None else None
    cfg = drafter.cfg if drafter is not None else None
    # A fused drafter reads several of the target's layers: every target forward hands
    # them over (hooked out of that same forward); otherwise the final-norm states.
    features = getattr(cfg, "feature_layers", None)
    with torch.inference_mode():
        cache = new_cache()
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=dev)
        pos = torch.arange(n_prompt, device=dev)[None]
        hidden, logits = target.forward(ids, pos, None, cache, last_logits_only=True, feature_layers=features)
        first = choose(logits[-1])
        produced = 0
        toks, reason = cut([first])
        _sync(dev)
        t1 = time.perf_counter()
        produced += len(toks)
        yield StepEvent(step=0, emitted=[EmittedToken(first, 0, "target", None)], accepted_length=0, rejected=[],
                        drafted=0, draft_s=0.0, verify_s=t1 - t0, elapsed_s=t1 - t0, target_choices=[first],
                        finished=reason is not None, finish_reason=reason)
        if reason is not None:
            return
        if session is not None:
            session.extend(hidden, torch.tensor(prompt_ids[1:] + [first], device=dev))
        if copier is not None:
            copier.extend([first])
        last = first
        step = 0
        while True:
            if stop is not None and stop.is_set():
                yield StepEvent(step=step + 1, emitted=[], accepted_length=0, rejected=[], drafted=0, draft_s=0.0,
                                verify_s=0.0, elapsed_s=time.perf_counter() - t0, finished=True,
                                finish_reason="stopped")
                return
            step += 1
            past = n_prompt + produced - 1  # cache length: every token except `last`
            ts = time.perf_counter()
            if session is not None:
                # The tree must fit in the context window: node at depth d sits at past + d.
                tree = session.propose(last, tree_settings, max_depth=ctx - past - 1, verify_cost=verify_cost)
            else:
                tree = DraftTree.root_only(last)
            if copier is not None:
                # The copied guess continues the context, whose last token is the root; beside a
                # drafter it shares the drafter's node budget (gumiho.copying).
                tree = copier.draft(tree, len(tree) - 1 if session is not None else None, max_depth=ctx - past - 1)
            _sync(dev)
            td = time.perf_counter()
            if len(tree) == 1:
                ids = torch.tensor([[last]], device=dev)
                hidden, logits = target.forward(ids, torch.tensor([[past]], device=dev), None, cache,
                                                feature_layers=features)
            else:
                ids, pos, mask = verify_inputs(tree, past, dev, target.dtype)
                hidden, logits = target.forward(ids, pos, mask, cache, feature_layers=features)
            children = tree.children()
            if greedy:
                acc = accept_greedy(tree, logits, children=children)
            else:
                probs = process_logits(logits, settings.temperature, settings.top_p, settings.top_k).cpu()
                acc = accept_sampling(tree, probs, gen, children=children)
            kept = [0] + acc.path
            if len(tree) > 1:
                keep_tree_entries(cache, past, kept)
            new_tokens = [tree.tokens[i] for i in acc.path] + [acc.bonus]
            if session is not None:
                session.extend(hidden[kept], torch.tensor(new_tokens, device=dev))
            if copier is not None:
                copier.observe(acc.path)
                copier.extend(new_tokens)
            _sync(dev)
            tv = time.perf_counter()
            toks, reason = cut(new_tokens)
            emitted = []
            for k, tok in enumerate(toks):
                if k < len(acc.path):
                    node = acc.path[k]
                    d = tree.depths[node]
                    emitted.append(EmittedToken(tok, d, tree.head_of(node, cfg), tree.probs[node]))
                else:
                    emitted.append(EmittedToken(tok, 0, "target", None))
            stop_node = acc.path[-1] if acc.path else 0
            rejected = [RejectedToken(tree.tokens[c], tree.depths[c], tree.head_of(c, cfg), tree.probs[c])
                        for c in children[stop_node]]
            produced += len(toks)
            yield StepEvent(step=step, emitted=emitted, accepted_length=len(acc.path), rejected=rejected,
                            drafted=len(tree) - 1, copy_nodes=sum(tree.copied), draft_s=td - ts, verify_s=tv - td,
                            copied_positions=[k + 1 for k, node in enumerate(acc.path) if tree.is_copied(node)],
                            elapsed_s=tv - t0,
                            tree=tree if keep_trees else None, accepted_nodes=acc.path,
                            target_choices=acc.target_choices, finished=reason is not None, finish_reason=reason)
            if reason is not None:
                return
            last = new_tokens[-1]


def generate(target: Target, prompt: Union[str, list, None] = None, drafter=None,
             settings: Optional[GenerationSettings] = None, prompt_ids: Optional[list[int]] = None,
             **overrides) -> GenerationResult:
    """Generate a whole answer. ``prompt`` (text or chat messages) goes through the
    target's chat template; ``prompt_ids`` bypasses it. Keyword overrides set
    GenerationSettings fields (max_new_tokens=..., temperature=..., tree=...)."""
    settings = check_settings(settings)
    for k, v in overrides.items():
        if not hasattr(settings, k):
            raise GumihoError(f"Unknown generation setting {k!r}.")
        setattr(settings, k, v)
    ids = check_prompt_ids(prompt_ids, target) if prompt_ids is not None else target.encode(prompt)
    steps = list(stream(target, ids, drafter, settings))
    tokens = [t for s in steps for t in s.tokens]
    text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    return GenerationResult(text=text, tokens=tokens, prompt_tokens=len(ids), steps=steps,
                            stats=summarize(steps, draft_depth(drafter)),
                            finish_reason=steps[-1].finish_reason if steps else None)
